"""pycage's Python side.

``pycage.protocol`` mirrors the fd-3 wire vocabulary (a Rust test compares it
with the host's); ``pycage.bootstrap`` is the child that runs one program.
Both are stdlib-only. See DESIGN.md §2 and §3.
"""
