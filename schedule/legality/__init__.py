"""Legality of schedules by polyhedral dependence analysis: the only package importing islpy.

``check_schedule(s)`` returns a ``LegalityReport``; ``tl.compile`` raises its first problem as an
``IllegalScheduleError`` naming the stage, the primitive, the loop, the dependence and a witness
pair of iterations.
"""

from .check import LegalityReport, Problem, check_schedule

__all__ = ["LegalityReport", "Problem", "check_schedule"]
