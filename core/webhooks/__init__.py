"""Webhooks: signed notices of a job's end, sent to the endpoints whoever runs the studio
registered (core/webhooks/registry.py), from an outbox (core/webhooks/outbox.py)."""
