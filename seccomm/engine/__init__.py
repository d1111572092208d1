"""The hop engine shared by every collective: seal, send, receive, open, consume — chunk by chunk.

One :class:`OpRun` per collective call holds the frame context (AAD constants) and an
:class:`OpContext`: what the call needs from its ``SecureComm`` (transport, workspace, keys,
crypto pool, encrypt policy), passed down explicitly.  :meth:`OpRun.exchange` runs one step of an
algorithm: it posts every receive of the step first, seals and sends each outgoing chunk as soon
as it is sealed, and opens and consumes (copies or reduces) each incoming chunk as soon as it has
arrived.  With a crypto thread pool and more than one chunk, sealing of chunk j+1 overlaps the
transfer of chunk j and opening of chunk j-1 (``cryptography`` releases the GIL).  Frames are
written into reusable workspaces: no allocation per chunk.

The modules, one mechanism each:

- :mod:`~seccomm.engine.hops`: what a step sends and receives (:class:`Send`, :class:`Recv`,
  :class:`Lend`);
- :mod:`~seccomm.engine.land`: the one place a received frame is accepted
  (:func:`~seccomm.engine.land.land`): wait, record, length, tag, and only then the plaintext;
- :mod:`~seccomm.engine.record`: the op's argument record in its first message (paired
  transports);
- :mod:`~seccomm.engine.receipts`: receipts of hops of many frames;
- :mod:`~seccomm.engine.swap`: one chunk each way (the small-message fast path);
- :mod:`~seccomm.engine.run`: :class:`OpRun` itself: keys, sealing, steps, the tree relay.
"""

from .hops import Lend, Recv, Send
from .land import CLEAR, Inbox, land
from .receipts import ACK_CLEAR_BYTES, RECEIPT_BYTES, Receipts
from .run import OpContext, OpRun

__all__ = [
    "ACK_CLEAR_BYTES", "CLEAR", "RECEIPT_BYTES", "Inbox", "Lend", "OpContext", "OpRun", "Receipts",
    "Recv", "Send", "land",
]  # fmt: skip
