"""The sandbox ledger's AWS deployment as a CDK v2 construct library
(``pip install 'sandbox-ledger-dynamodb[cdk]'``): :class:`SandboxLedger` for the whole
deployment, :class:`LedgerTable` for the table and its descriptor alone, and their props,
:class:`LedgerConfig`."""

import os

# jsii prints a banner (as Python bytes lines) at the first import of the CDK when Node is
# past its end of life; the CDK still works there. Silenced for those releases, unless the
# variable is already set (set it to "" to see the banner again).
os.environ.setdefault(
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "10,12,14,16,17,18,19,20,21,23"
)

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
