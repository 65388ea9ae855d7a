"""Schedules, the loop-nest IR, lowering and (with islpy) legality. Imports: tensorlang, islpy."""

from .ir import Allocate, Block, Buffer, For, ForKind, IfThenElse, LetStmt, Load, LoweredFunc
from .ir import ProducerConsumer, Stmt, Store, print_stmt
from .lower import lower

__all__ = ["Allocate", "Block", "Buffer", "For", "ForKind", "IfThenElse", "LetStmt", "Load",
           "LoweredFunc", "ProducerConsumer", "Stmt", "Store", "print_stmt", "lower"]
