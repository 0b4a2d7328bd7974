"""The keys moto's response serializer tries for a member are worked out once per member."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import Adjustment, Mismatch, active

if TYPE_CHECKING:
    from collections.abc import Iterable

NAME = "serializer"
KNOWN_SOURCES = {
    "XFormedAttributePicker": frozenset({"88d8b10729f01416"}),
    "ResponseSerializer.get_value": frozenset({"956d0b158a71cdbd"}),
    "AttributePickerContext": frozenset({"463fab4b87f6b819"}),
    "AttributePicker": frozenset({"199c2153f48f344a"}),
    "ExplicitAlias": frozenset({"b1eb3ac19ee00f2b"}),
    "ShapeNameAlias": frozenset({"0b7d01a590896acb"}),
    "NoAlias": frozenset({"6ae10e4f428899ee"}),
    "ShapePrefixAlias": frozenset({"26f1584fe4093ac7"}),
    "ClassPrefixAlias": frozenset({"0766a213874b457d"}),
    "ModelAlias": frozenset({"6c1992df6d0915c6"}),
}

_ALIAS_PROVIDERS = (
    "ExplicitAlias",
    "ShapeNameAlias",
    "NoAlias",
    "ShapePrefixAlias",
    "ClassPrefixAlias",
    "ModelAlias",
)
SERIALIZER_KEYS_CACHED = 4096
"""Response members whose candidate keys moto's serializer remembers (about 300 in the demo)."""


def _sources() -> dict[str, Any]:
    from moto.core import serialize

    providers = tuple(provider.__name__ for provider in serialize.DEFAULT_ALIAS_PROVIDERS)
    if providers != _ALIAS_PROVIDERS:
        raise Mismatch(f"moto's serializer's alias providers are {list(providers)}")
    return {
        "ResponseSerializer.get_value": serialize.ResponseSerializer.get_value,
        **{
            name: getattr(serialize, name)
            for name in (
                "AttributePickerContext",
                "XFormedAttributePicker",
                "AttributePicker",
                *providers,
            )
        },
    }


def _install(stock: dict[str, Any]) -> None:
    """Work out once, per response member, which keys moto's serializer looks up in a dict.

    moto's response serializer finds each member of a response's shape in the object
    returned by its backend by trying keys from six alias providers (the member's name, the
    shape's, prefixes stripped, botocore's snake_case of each), instantiating the six and a
    context object for every member of every value: for DynamoDB, whose results are dicts
    of items, every attribute of every item (ten members of ``AttributeValue`` each). A
    20-item Query response took 25-35 ms to serialize. For a plain ``dict`` those candidate
    keys depend only on the member's shape, its parent shape and the member's name (a dict
    has no ``Meta`` and its class name is always ``dict``): moto's own code computes them
    once per (shape, parent, name), and afterwards the member's value is the value under
    the first of them the dict holds (None if none), as moto's picker answers when no
    response transformer applies (else moto's picker runs). Any other object goes through
    moto unchanged.
    """
    from moto.core import serialize as moto_serialize

    serialize: Any = moto_serialize
    picker = stock["XFormedAttributePicker"]
    stock_keys = picker.get_possible_keys
    stock_get_value = stock["ResponseSerializer.get_value"]
    defaults = serialize.DEFAULT_ALIAS_PROVIDERS
    known = tuple(defaults)
    remembered: dict[tuple[Any, Any, str], tuple[tuple[str, ...], bool]] = {}

    def keys_of(
        self: Any, obj: Any, key: Any, shape: Any, context: Any
    ) -> tuple[tuple[str, ...], bool] | None:
        """The keys moto's picker ``self`` tries for member ``key`` of a dict, and whether
        none of them is a dotted path; None when moto must decide."""
        if (
            type(obj) is not dict
            or type(key) is not str
            or self.alias_providers is not defaults
            or tuple(defaults) != known
            or active(NAME) is None
        ):
            return None
        member = (shape, getattr(shape, "parent", None), key)
        found = remembered.get(member)
        if found is None:
            if context is None:
                context = serialize.AttributePickerContext(obj=obj, key=key, shape=shape)
            keys = tuple(stock_keys(self, context))
            found = (keys, not any("." in candidate for candidate in keys))
            if len(remembered) >= SERIALIZER_KEYS_CACHED:
                remembered.clear()
            remembered[member] = found
        return found

    def get_possible_keys(self: Any, context: Any) -> Iterable[str]:
        found = keys_of(self, context.obj, context.key, context.shape, context)
        return stock_keys(self, context) if found is None else found[0]

    def get_value(self: Any, value: Any, key: str, shape: Any) -> Any:
        # moto's ResponseSerializer.get_value and AttributePicker.__call__ for a member of a
        # plain dict, when no response transformer applies: the value under the first of
        # the member's keys that the dict holds (None included), else None.
        value_picker = self._value_picker
        if type(value_picker) is picker and not value_picker.response_transformers:
            found = keys_of(value_picker, value, key, shape, None)
            if found is not None and found[1]:
                for candidate in found[0]:
                    if candidate in value:
                        return value[candidate]
                return None
        return stock_get_value(self, value, key, shape)

    picker.get_possible_keys = get_possible_keys
    serialize.ResponseSerializer.get_value = get_value


ADJUSTMENT = Adjustment(
    name=NAME,
    gain="the keys moto's serializer tries for a member are worked out once per member",
    behaviour=None,
    sources=_sources,
    known=KNOWN_SOURCES,
    install=_install,
)
