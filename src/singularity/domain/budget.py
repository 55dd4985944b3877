"""The budget (spec §8.1): exact decimal money that the solvency gate reads."""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field

from singularity.domain.records import Money
from singularity.money import sub


class Budget(BaseModel):
    """Starting balance, what remains, what was spent and earned."""

    model_config = ConfigDict(strict=True)

    starting: Money
    remaining: Money
    api_spent: Money
    instance_spent: Money
    total_tokens: int = Field(ge=0)
    earned: Money
    children_funded: Money = Decimal(0)
    """Funds moved to children at spawn (decision 17); an extension readers may ignore."""
    operator_credited: Money = Field(default=Decimal(0), exclude_if=lambda amount: amount == 0)
    """Funds an operator added (an audited credit, never revenue); an extension, written
    only once there is one."""
    last_operation: str | None = None
    """The operation id of the newest debit applied (decision 16); an extension."""

    @classmethod
    def fresh(cls, starting: Decimal) -> Budget:
        """A new being's budget."""
        zero = Decimal(0)
        return cls(
            starting=starting,
            remaining=starting,
            api_spent=zero,
            instance_spent=zero,
            total_tokens=0,
            earned=zero,
        )

    @property
    def net_profit(self) -> Decimal:
        """Earned minus everything spent; derived, never stored."""
        return sub(sub(self.earned, self.api_spent), self.instance_spent)

    @property
    def solvent(self) -> bool:
        """The solvency predicate: `remaining > 0`."""
        return self.remaining > 0
