"""``python -m pycaffe_ft.cli``: what the ``pycaffe-ft`` command runs (the --np launcher starts
ranks this way)."""
import sys

from . import main

sys.exit(main())
