"""Projections: derived state kept up to date one event at a time."""
