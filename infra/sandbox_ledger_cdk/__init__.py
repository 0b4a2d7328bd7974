"""The sandbox ledger's AWS deployment as a CDK v2 construct library
(``pip install 'sandbox-ledger-dynamodb[cdk]'``): :class:`SandboxLedger` for the whole
deployment, :class:`LedgerTable` for the table and its descriptor alone, and their props,
:class:`LedgerConfig`."""

from .config import ConfigError, LedgerConfig
from .deployment import SandboxLedger
from .nag import acknowledge
from .table import LEDGER, READER, RESOURCES, WORKER, Access, LedgerTable

__all__ = [
    "LEDGER",
    "READER",
    "RESOURCES",
    "WORKER",
    "Access",
    "ConfigError",
    "LedgerConfig",
    "LedgerTable",
    "SandboxLedger",
    "acknowledge",
]
