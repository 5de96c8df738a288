"""pycage's Python side.

``pycage.protocol`` mirrors the fd-3 wire vocabulary (a Rust test compares it
with the host's); ``pycage.bootstrap`` is the child that runs one program;
``pycage.script`` compiles a program as the script ``__main__``. All are
stdlib-only. See docs/protocol.md and docs/semantics.md.
"""
