"""pycage's child side: the process that runs one model-written program.

``pycage.bootstrap`` is the child (its docstring lists the modules by
concern); ``pycage._wire`` holds every frame's encoder and checker, generated
from the host's table; ``pycage.script`` compiles a program as the script
``__main__``; ``pycage.zygote`` forks children. All are stdlib-only. See
docs/protocol.md and docs/semantics.md.
"""
