"""The example's tests import ``kv_connector`` from this directory (pytest's importlib
mode puts no test directory on ``sys.path``); the topology processes inherit the path."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
