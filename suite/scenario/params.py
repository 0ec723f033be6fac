"""Typed case parameters: what a sweep's `params` may hold, per workload and per precision.

The generic machinery: each workload and each precision declares its own model, derived from
`Params`, in its folder's torch-free `__init__.py`, and its record (`suite.scenario.declare`) names
it. A case's parameters are the union of its workload's and its precision's fields: strict types
(TOML's `true` is no 1, "64" is no 64), unknown keys refused, every field documented. They are
checked when the scenario loads (`suite.scenario.spec`), so a typo is a one-line error with exit
status 2 before anything runs, and normalised when it is planned (`normalise`): only non-default
values of keys that the case's own workload or precision knows are kept, so `{}` and the explicit
defaults are one case (one `case_id`), and a key meant for another precision of the sweep does not
split a bf16 case in two.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, create_model

from suite.core.errors import UserError

PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]


def _finite(x: float) -> float:
    if not math.isfinite(x):
        raise ValueError("must be a finite number")
    return x


NonNegativeFloat = Annotated[float, Field(ge=0), AfterValidator(_finite)]
PositiveFloat = Annotated[float, Field(gt=0), AfterValidator(_finite)]


class Params(BaseModel):
    """Base of every parameter model: strict types, unknown keys refused, immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @classmethod
    def of(cls, params: dict):
        """This model from a case's params (which may hold the other side's keys too: a case's
        params are its workload's and its precision's); a bad value is a one-line UserError."""
        try:
            return cls.model_validate({k: v for k, v in params.items() if k in cls.model_fields})
        except ValidationError as err:
            raise UserError(f"params.{one_line(err)}") from None


class NoParams(Params):
    """A workload or precision without parameters."""


# Marks a bool parameter that, true, makes the case torch.compile something (its model, its step, an
# optimizer's step): `Field(..., json_schema_extra=COMPILES)`. The first call then pays the compile,
# which the fleet's cost prior adds (`suite.fleet.shard.compiles`) whatever the folder named it.
COMPILES = {"compiles": True}


def compiles(values: Params) -> bool:
    """Whether any parameter its folder marks `COMPILES` is true in these values."""
    return any(getattr(values, name) for name, info in type(values).model_fields.items()
               if (info.json_schema_extra or {}).get("compiles"))


# --- the parameters of one case ----------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def case_model(workload_params: type[Params], precision_params: type[Params]) -> type[Params]:
    """One model with the fields of both (a field both declare must agree on its type)."""
    if precision_params is NoParams:
        return workload_params
    if workload_params is NoParams:
        return precision_params
    fields = {}
    for model in (workload_params, precision_params):
        for name, info in model.model_fields.items():
            fields.setdefault(name, (info.annotation, info))
    return create_model(f"{workload_params.__name__}_{precision_params.__name__}", __base__=Params, **fields)


def one_line(err: ValidationError) -> str:
    """A pydantic error as `key: what is wrong` (the first of them)."""
    first = err.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"] if not str(p).startswith("function-"))
    msg = "unknown parameter" if first["type"] == "extra_forbidden" else first["msg"].removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg


def field_error(model: type[Params], key: str, value: Any) -> str | None:
    """Why `value` is not valid for `key` of `model` (None when it is), checked alone: errors about
    other fields (a required one left to another sweep entry) do not count here."""
    try:
        model.model_validate({key: value})
    except ValidationError as err:
        mine = [e for e in err.errors(include_url=False) if e["loc"] and e["loc"][0] == key]
        if mine:
            return mine[0]["msg"].removeprefix("Value error, ")
    return None


def normalise(model: type[Params], raw: dict) -> dict:
    """The case's parameters as its identity sees them: the keys `model` knows, validated, with
    values equal to their defaults left out. Raises ValidationError for a bad value."""
    known = {k: v for k, v in raw.items() if k in model.model_fields}
    return model.model_validate(known).model_dump(exclude_defaults=True)


def params_without(params: str, key: str) -> str:
    """A record's `params` (JSON text) without one key, as sorted JSON text: what its case is
    beside the parameter a plot or an answer follows (an unreadable cell is no parameters)."""
    p = json.loads(params) if isinstance(params, str) else {}
    p.pop(key, None)
    return json.dumps(p, sort_keys=True)
