"""Schedules, the loop-nest IR, lowering and (with islpy) legality. Imports: tensorlang, islpy."""

from .ir import (
           Allocate,
           Block,
           Buffer,
           For,
           ForKind,
           IfThenElse,
           LetStmt,
           Load,
           LoweredFunc,
           ProducerConsumer,
           Stmt,
           Store,
           print_stmt,
)
from .lower import lower
from .trace import LoopRef, Step, TailStrategy
from .schedule import Schedule, Stage

__all__ = ["Allocate", "Block", "Buffer", "For", "ForKind", "IfThenElse", "LetStmt", "Load",
           "LoweredFunc", "ProducerConsumer", "Stmt", "Store", "print_stmt", "lower", "LoopRef", "Step",
           "TailStrategy", "Schedule", "Stage"]
