"""Evidence for a security or compliance review: the attacker harness, the wire and packet
checks, and the report that collects them (``seccomm report --compliance``)."""
