"""Helpers the tests share (docs/tests.md): job factories, page openers, servers, fixtures
registered by tests/conftest.py. No test module imports another; they import from here."""
