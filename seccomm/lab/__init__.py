"""The scaling lab: emulated multi-host clusters on one machine (network namespaces, veth links
shaped with ``tc``, racks joined by oversubscribed uplinks), on which ``seccomm bench`` measures
real inter-host traffic.  ``seccomm cluster`` is its command; docs/scaling.md how it works.

:mod:`.spec` what a cluster is; :mod:`.netns` build and teardown; :mod:`.cluster` the context
manager and the MPMD launch; :mod:`.tunnel` WireGuard between the hosts; :mod:`.sweep` the
bench per host count and the scaling table; :mod:`.diagnose` where each measured row's time goes
(from the calibrated model); :mod:`.report` the HTML report and the rows for BI tools.
"""

from .cluster import Cluster, Interrupted
from .spec import ClusterSpec, parse_rate

__all__ = ["Cluster", "ClusterSpec", "Interrupted", "parse_rate"]
