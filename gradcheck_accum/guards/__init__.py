"""The guard: checks a real training job's accumulation windows as it runs (`guard()`), plus
callbacks for the HF Trainer (`guards.hf`) and Lightning (`guards.lightning`).

Imports torch; `gradcheck_accum` loads it lazily so that `accumcheck lint` never does.
"""

from gradcheck_accum.guards.core import Guard, GuardError, GuardWarning, guard
from gradcheck_accum.guards.violations import Violation

__all__ = ["Guard", "GuardError", "GuardWarning", "Violation", "guard"]
