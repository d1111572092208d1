"""PyTorch integration: an encrypted DDP communication hook over ``torch.distributed``.

Needs the ``torch`` extra (``pip install 'seccomm[torch]'``; in a checkout ``pip install -e '.[torch]'``);
``import seccomm`` never imports torch.
"""

from .hook import SecureHookState, secure_allreduce_hook
from ..transports.torch import TorchTransport

__all__ = ["SecureHookState", "secure_allreduce_hook", "TorchTransport"]
