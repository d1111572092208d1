"""PyTorch integration: an encrypted DDP communication hook over ``torch.distributed``.

Needs the ``torch`` extra (in the checkout: ``pip install -e '.[torch]'``; docs/install.md says how
to get torch's CPU build);
``import seccomm`` never imports torch.
"""

from .hook import SecureHookState, secure_allreduce_hook
from ..transports.torch import TorchTransport

__all__ = ["SecureHookState", "secure_allreduce_hook", "TorchTransport"]
