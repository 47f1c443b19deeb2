"""Value ranges of the registered functions' parameters, written in their signatures
(``clip_low: LowerClip = 0.2``): the config checks a ``{name, ...parameters}`` entry
against them, so a function's signature is the one home of its parameters' defaults and
ranges."""

from __future__ import annotations

from typing import Annotated

from annotated_types import Ge, Gt, Interval

LowerClip = Annotated[float, Interval(ge=0.0, lt=1.0)]
"""A lower clip range: the ratio is clipped below at 1 - value."""
UpperClip = Annotated[float, Ge(0.0)]
"""An upper clip range: the ratio is clipped above at 1 + value."""
DualClip = Annotated[float, Gt(1.0)]
"""A dual-clip bound (above 1)."""
Positive = Annotated[float, Gt(0.0)]
NonNegative = Annotated[float, Ge(0.0)]
UnitInterval = Annotated[float, Interval(ge=0.0, le=1.0)]
"""A discount or a mixing weight in [0, 1]."""
Fraction = Annotated[float, Interval(gt=0.0, le=1.0)]
"""A share of tokens or groups in (0, 1]."""
