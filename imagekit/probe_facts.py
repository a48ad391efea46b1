"""The name the probe's source-tree fallback imports (``imagekit/probe/facts.py``). The probe's
bytes are in every cell's input digest, so the name stays until the probe changes for another
reason; the facts are ``imagekit.facts.probe_facts``'s."""

from imagekit.facts.probe_facts import probe_facts

__all__ = ["probe_facts"]
