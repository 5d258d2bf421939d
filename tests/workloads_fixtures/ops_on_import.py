"""Importing this module runs torch operations and starts a thread (when armed, see ``import_hostile``).

Neither is harmful in a child, but both make the module unsafe to import in a process that will
fork: the attempt server must notice and leave the import to each attempt's child.
"""

import threading
import time

import torch

from .import_hostile import armed, make  # noqa: F401 - the factory

if armed():
    TABLE = torch.arange(16).reshape(4, 4).sum(dim=0)
    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
