"""Names of the settings the projections give a meaning to, apart from what they mean:
``setting_values`` checks them at append and ``agents`` reads them, neither importing the
other (the check imports ``agents`` only when such a setting is written)."""

AGENT_MANIFESTS = "agent_manifests"
"""The setting that replaces or adds agent manifests (``projections.agents``)."""
