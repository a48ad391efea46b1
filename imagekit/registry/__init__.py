"""The OCI Distribution API, spoken by imagekit itself: the client, its transport (auth, retries, bounds),
manifests and credentials."""
