"""Attestations: keys, DSSE and the verification statement, attaching them to a digest, an image index's own,
and the SBOM."""
