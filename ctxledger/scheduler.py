"""Where databases find the nightly rollup job: ``ctxledger.scheduler:nightly_rollup``.

APScheduler stores a job's callable as its module path (``JOB_FUNC``), and a database
keeps the job across releases, so that path must keep resolving. The scheduler itself is
``ctxledger.jobs._scheduler``.
"""

from ctxledger.jobs._scheduler import nightly_rollup

__all__ = ["nightly_rollup"]
