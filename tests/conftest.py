import os
import sys

# Make the statistical helpers in this folder importable as plain modules.
sys.path.insert(0, os.path.dirname(__file__))
