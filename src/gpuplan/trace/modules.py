"""Which module an op belongs to, in forward and in backward, without tensor hooks.

``torch.utils.module_tracker.ModuleTracker`` attributes backward ops through gradient hooks on
every module's inputs and outputs; those hooks form reference cycles that keep recomputed
activations alive under activation checkpointing until the cyclic GC runs — the tracker would
change the memory it is measuring. Here forward attribution is a stack kept by global module
hooks, and backward attribution reads a tag written into each autograd node's ``metadata`` when
its module's forward finished: ``torch._C._current_autograd_node()`` names the node being run.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves

_TAG = "gpuplan_module"


class ModuleScope:
    """Context manager: ``current()`` is the innermost module path of the running op."""

    def __init__(self, root: nn.Module | None = None) -> None:
        self._names: dict[int, str] = {}
        if root is not None:
            self._names = {id(m): name for name, m in root.named_modules()}
        self._stack: list[str] = []
        self._handles: list[Any] = []

    def __enter__(self) -> ModuleScope:
        self._handles = [
            nn.modules.module.register_module_forward_pre_hook(self._pre),
            # always_call: checkpointing aborts a recompute midway (it stops once the tensors it
            # needs exist); the stack must still be popped.
            nn.modules.module.register_module_forward_hook(self._post, always_call=True),
        ]
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self._stack.clear()

    def _name(self, module: nn.Module) -> str:
        return self._names.get(id(module), type(module).__name__)

    def _pre(self, module: nn.Module, args: Any) -> None:
        self._stack.append(self._name(module))

    def _post(self, module: nn.Module, args: Any, output: Any) -> None:
        name = self._stack.pop() if self._stack else self._name(module)
        if output is not None and torch.is_grad_enabled():
            self._tag_graph(name, output)

    @staticmethod
    def _tag_graph(name: str, output: Any) -> None:
        """Tag the autograd nodes this module created, walking back from its outputs until nodes
        that another (non-descendant) module already tagged."""
        prefix = name + "."
        todo = [t.grad_fn for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        seen: set[int] = set()
        while todo:
            node = todo.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            metadata: dict[str, Any] = node.metadata  # type: ignore[assignment]
            owner = metadata.get(_TAG)
            if owner is None:
                metadata[_TAG] = name
            elif owner != name and not owner.startswith(prefix):
                continue  # created before this module ran (its inputs' history)
            if type(node).__name__ == "AccumulateGrad":
                continue
            todo.extend(nxt for nxt, _ in node.next_functions if nxt is not None)

    def current(self) -> str:
        """The innermost running module: the forward stack (also during a recompute), else the
        module whose autograd node is being run."""
        if self._stack:
            return self._stack[-1]
        return self.current_node_module()

    @staticmethod
    def current_node_module() -> str:
        """The module whose backward is running (a recompute triggered inside it counts as its)."""
        node = torch._C._current_autograd_node()
        if node is not None:
            metadata: dict[str, Any] = node.metadata  # type: ignore[assignment]
            return str(metadata.get(_TAG, ""))
        return ""
