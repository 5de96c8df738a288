"""pycage's matplotlib backend: ``plt.show()`` displays every open figure.

The child sets ``MPLBACKEND=module://pycage.mpl_backend``, so a program that
imports matplotlib draws with Agg and ``plt.show()`` sends each open pyplot
figure as an ``image/png`` display (``pycage.display``), at its own size,
then closes them, as Jupyter's inline backend does. Figures still open when
the run ends are shown the same way (``pycage.display.flush_figures``).
Nothing here runs unless the program imports matplotlib.
"""

from matplotlib.backend_bases import FigureManagerBase
from matplotlib.backends.backend_agg import FigureCanvasAgg

from pycage.display import show_figures

FigureCanvas = FigureCanvasAgg
FigureManager = FigureManagerBase


def show(*args, block=None, **kwargs):
    """``plt.show()``: display every open figure, then close them."""
    show_figures()
