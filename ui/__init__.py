"""What the pages share: widgets, the UI process's store and caches, sign-in and text.

Pages (``pages/``) are only pages, each named in app.py; they and this package hold
widgets and call ``core`` for the work. Nothing in ``core`` imports this package.
"""
