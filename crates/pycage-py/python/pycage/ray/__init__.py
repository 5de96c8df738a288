"""pycage on Ray: one warm :class:`pycage.Runtime` per node, and
:class:`RayRuntime`, with the ``run`` / ``arun`` / ``session`` API and the
:class:`pycage.Result` of a local runtime, across a cluster.

>>> import ray
>>> from pycage.ray import RayRuntime
>>> context = ray.init()
>>> with RayRuntime(isolation="process") as rt:
...     rt.run("return 6 * 7").value
42

The API is the local runtime's own (``pycage._api``: one definition of
``run``, ``arun``, ``session`` and their arguments); this package only
carries runs to the nodes and their outcomes back:

- :class:`CageNode`, a Ray actor pinned to one node (node affinity, not
  soft). It owns one :class:`pycage.Runtime` (its zygote and pool stay
  warm) and runs programs and sessions there through that runtime's API.
- :class:`RayRuntime`, on the driver: it picks a node for each run (the
  less loaded of two random live nodes, "power of two choices"), pins each
  session to one node by rendezvous hashing of the session's key over the
  live nodes, notices nodes that die (their sessions end with the usual
  :class:`pycage.SessionEndedError`) and nodes that join.
- The way bindings stay with the caller. A Python-callable binding is never
  pickled to a node: the node's program calls a stand-in that puts the call
  on the run's own result stream (a Ray streaming generator consumed by the
  driver process, the broker between the node and the caller); the driver
  runs the caller's own function (sync ones on a thread pool, async ones on
  the run's event loop, in a copy of the caller's ``contextvars``, as
  locally) and answers with one actor call carrying the value as canonical
  JSON. A binding may so close over anything the driver holds: locks,
  sockets, a database handle. (A Ray actor cannot live in the driver
  process; the stream's consumer is the part that does.) Callbacks
  (``on_log``, ``on_call``, ``on_display``) come back on the same stream.
- Files: a run's ``inputs`` are read on the driver and written on its
  node; what the program leaves in ``out/`` comes back into the driver's
  ``output_dir``. The nodes need share no filesystem with the driver.

Ray is an optional dependency: ``pip install "pycage[ray]"``.

Layers
------

Each module imports only those listed before it (``tests/test_layers.py``):
``_wire`` (what crosses between the driver and a node: bindings without
their callables, file trees), ``_node`` (:class:`CageNode`), ``_calls``
(the driver's end of bindings), ``_stream`` (the driver's end of one run),
``_session`` (:class:`RaySession`), then ``_runtime``
(:class:`RayRuntime`).
"""

try:
    import ray  # noqa: F401 - the dependency, checked once here
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError('pycage.ray needs Ray: pip install "pycage[ray]"') from e

from ._node import CageNode
from ._runtime import RayRuntime
from ._session import RaySession
from ._stream import NodeInfo
from ._wire import NoLiveNodeError

__all__ = ["RayRuntime", "RaySession", "CageNode", "NodeInfo", "NoLiveNodeError"]
