"""What the doctor watches besides the steps: the machine, the process tree, the main thread's stack.

:class:`Monitor` is the sampler thread the capture starts around the user's script;
:func:`run_probes` are the short measurements taken after the script ends; :func:`is_user_file`
says which source files are the user's own code.
"""

from stave.monitor.probes import run_probes
from stave.monitor.procfs import ProcPaths
from stave.monitor.sampler import Monitor
from stave.monitor.stacks import is_user_file

__all__ = ["Monitor", "ProcPaths", "is_user_file", "run_probes"]
