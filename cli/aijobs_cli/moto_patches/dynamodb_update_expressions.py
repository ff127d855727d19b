"""Update expressions are parsed once per text, cloned cheaply, and their value-free checks reused.

What moto does slowly (moto.dynamodb.parsing: UpdateExpressionParser.make,
UpdateExpressionValidator): it parses an UpdateExpression twice per UpdateItem (once to list the
names and values it uses, once to apply it), deep-copies the tree (with copy.deepcopy's generic
machinery), then runs ten checks and rewrites over it. Three of them depend on the text,
ExpressionAttributeNames and the table's key attributes alone (one SET/REMOVE/ADD clause each, no
overlapping paths, no key attribute updated), and two of those walk the whole tree again at every
nested action: their cost grows with the square of the number of actions (the job store's updates
set a dozen attributes and more).

The patch keeps each text's parsed tree (moto only reads it: the validator works on its copy),
copies it node by node (the same copy deepcopy makes, for trees of nodes, strings and numbers;
anything else goes to deepcopy), and skips those three checks for a text, names and key attributes
that passed them before. Everything that depends on the values or the item (value binding, paths,
functions, types, empty keys) runs every time; an expression moto refuses is refused again, with
moto's error. Remove when moto's validator stops re-walking the tree per action and its parses get
cheap.

Written for moto MOTO_VERSION (5.2.5). Upstream: not reported upstream (see
docs/reference/moto-patches.md for the issue we would file).
"""

from __future__ import annotations

import copy
import functools
import importlib
import threading
from functools import wraps
from typing import Any

#: The moto release this patch was written for (aijobs_cli.moto_patches checks it).
MOTO_VERSION = "5.2.5"
UPSTREAM = "not reported upstream"


class _NotPlain(Exception):
    """A tree _clone_tree leaves to copy.deepcopy."""


_PLAIN = (str, int, float, bool, type(None))
_EXPRESSION_CACHE_LIMIT = 4096
# Update expressions as moto parsed them, by text (moto only reads a parsed tree: its validator
# works on a copy); and the text of each, by the tree's id (the trees are kept: ids stay unique).
_parsed_updates: dict[str, Any] = {}
_update_sources: dict[int, str] = {}
# (text, ExpressionAttributeNames, the table's key attributes) that passed moto's checks that
# depend on nothing else: one clause of each kind, no overlapping paths, no key attribute updated.
_checked_updates: set[tuple[Any, ...]] = set()
_expressions_lock = threading.Lock()
_node_class: Any = None  # moto's expression tree Node, once apply() has imported it
_VALUE_FREE_CHECKS: tuple[type, ...] = ()  # those checks' classes, in moto's order


@functools.cache
def _copies_plainly(cls: Any) -> bool:
    """Whether copy.deepcopy copies an instance of `cls` as its __dict__, attribute by attribute."""
    return (
        cls.__reduce_ex__ is object.__reduce_ex__
        and cls.__reduce__ is object.__reduce__
        and getattr(cls, "__getstate__", None) is getattr(object, "__getstate__", None)
        and not hasattr(cls, "__setstate__")
        and not hasattr(cls, "__deepcopy__")
        and "__slots__" not in {name for klass in cls.__mro__ for name in vars(klass)}
    )


def _clone_tree(root: Any) -> Any:
    """What copy.deepcopy makes of a parsed expression tree, made without its generic machinery;
    None when the tree holds anything but nodes, their lists of children, strings, numbers and
    parents inside the tree (the caller then deep-copies)."""
    if not isinstance(root, _node_class) or getattr(root, "parent", None) is not None:
        return None
    copies: dict[int, Any] = {}
    nodes: list[tuple[Any, Any]] = []

    def clone(node: Any) -> Any:
        done = copies.get(id(node))
        if done is not None:
            return done
        cls: Any = type(node)
        if not _copies_plainly(cls):
            raise _NotPlain
        new = cls.__new__(cls)
        copies[id(node)] = new
        nodes.append((node, new))
        attributes: dict[str, Any] = {}
        for name, value in node.__dict__.items():
            if name == "parent":
                attributes[name] = None  # set below, once every node has its copy
            elif type(value) is list and name == "children":
                children = []
                for child in value:
                    if isinstance(child, _node_class):
                        children.append(clone(child))
                    elif type(child) in _PLAIN:
                        children.append(child)
                    else:
                        raise _NotPlain
                attributes[name] = children
            elif type(value) in _PLAIN:
                attributes[name] = value
            else:
                raise _NotPlain
        new.__dict__.update(attributes)
        return new

    try:
        copied = clone(root)
        for node, new in nodes:
            parent = node.__dict__.get("parent")
            if parent is not None:
                if id(parent) not in copies:
                    raise _NotPlain
                new.parent = copies[id(parent)]
    except (_NotPlain, RecursionError):
        return None
    return copied


def _deepcopy_tree(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """copy.deepcopy inside moto's validators module: expression trees are cloned directly."""
    if memo is None and isinstance(value, _node_class):
        copied = _clone_tree(value)
        if copied is not None:
            return copied
    return copy.deepcopy(value, memo)


def _check_key(validator: Any) -> tuple[Any, ...] | None:
    """What the value-free checks of this validation depend on; None if it is not known."""
    source = getattr(validator, "_speedups_source", None)
    if source is None:
        return None
    names = validator.expression_attribute_names
    try:
        return (
            source,
            None if names is None else tuple(sorted(names.items())),
            tuple(validator.table.table_key_attrs),
        )
    except (TypeError, AttributeError):
        return None


def _patch_parser(expressions: Any) -> None:
    parser_class = expressions.UpdateExpressionParser
    original_make = parser_class.__dict__["make"].__func__

    def make(cls: Any, expression_str: Any) -> Any:
        if cls is not parser_class or not isinstance(expression_str, str):
            return original_make(cls, expression_str)
        tree = _parsed_updates.get(expression_str)
        if tree is not None:
            return tree
        tree = original_make(cls, expression_str)  # an invalid expression raises: nothing kept
        # Only trees the validator can clone (the others are moto's to copy, each time).
        if _clone_tree(tree) is not None and len(_parsed_updates) < _EXPRESSION_CACHE_LIMIT:
            with _expressions_lock:
                _update_sources[id(tree)] = expression_str
                _parsed_updates.setdefault(expression_str, tree)
        return tree

    parser_class.make = classmethod(make)


def _patch_validator(validators: Any) -> None:
    validator_class = validators.UpdateExpressionValidator
    original_init = validator_class.__init__

    @wraps(original_init)
    def __init__(self: Any, expression: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, expression, *args, **kwargs)
        source = _update_sources.get(id(expression))
        self._speedups_source = source if _parsed_updates.get(source or "") is expression else None

    def validate(self: Any) -> Any:
        processors = self.processors
        key = _check_key(self)
        if key is not None and tuple(type(p) for p in processors[: len(_VALUE_FREE_CHECKS)]) != (
            _VALUE_FREE_CHECKS
        ):
            key = None
        skip = len(_VALUE_FREE_CHECKS) if key is not None and key in _checked_updates else 0
        node = self.node_to_validate
        for index, processor in enumerate(processors):
            if index < skip:
                continue  # passed before for this text, these names and this table's keys
            node = processor.traverse(node)
            if (
                key is not None
                and not skip
                and index == len(_VALUE_FREE_CHECKS) - 1
                and len(_checked_updates) < _EXPRESSION_CACHE_LIMIT
            ):
                _checked_updates.add(key)
        return node

    validator_class.__init__ = __init__
    validator_class.validate = validate
    setattr(validators, "deepcopy", _deepcopy_tree)  # noqa: B010 (moto imports deepcopy by name)


def install(originals: dict[str, Any]) -> None:
    """Record moto's parser, validator and the validators module's deepcopy in `originals`, then
    replace them."""
    global _node_class, _VALUE_FREE_CHECKS
    # moto's parsing modules are untyped (`# type: ignore`): looked up as plain modules.
    ast_nodes: Any = importlib.import_module("moto.dynamodb.parsing.ast_nodes")
    expressions: Any = importlib.import_module("moto.dynamodb.parsing.expressions")
    validators: Any = importlib.import_module("moto.dynamodb.parsing.validators")
    originals.setdefault("UpdateExpressionParser.make", expressions.UpdateExpressionParser.__dict__["make"])
    originals.setdefault("UpdateExpressionValidator.__init__", validators.UpdateExpressionValidator.__init__)
    originals.setdefault("UpdateExpressionValidator.validate", validators.UpdateExpressionValidator.validate)
    originals.setdefault("validators.deepcopy", validators.deepcopy)
    _node_class = ast_nodes.Node
    _VALUE_FREE_CHECKS = (
        validators.ActionCountValidator,
        validators.OverlappingPathsValidator,
        validators.UpdateHashRangeKeyValidator,
    )
    _patch_parser(expressions)
    _patch_validator(validators)
