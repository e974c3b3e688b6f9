"""The HTTP service over ``Ledger`` (``ctxledger serve``): FastAPI served by uvicorn.

Private: ``app.create_app`` builds the application. ``keys`` needs neither FastAPI nor
uvicorn (the ``keys`` commands use it), so nothing here is imported eagerly.
"""
