"""What billing announces to the rest of the platform; billing decides, other apps act.

`credit_shortfall` is sent after a meter batch commits that could not charge a job in full (its
wallet ran out): the job must stop. Whoever acts on it (workers.receivers) may be lost with its
process; the reconciler's low-balance check (billing.services.holds.credit_stops) finds the same
job on its next pass, so nothing depends on this signal arriving.
"""

from __future__ import annotations

from django.dispatch import Signal

# Keyword arguments: job_id (int), reason (str, for the user), data (dict: the shortfall), now (datetime).
credit_shortfall = Signal()
