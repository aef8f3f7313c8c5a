"""Row policies: when an open row closes. Open (the default) closes a row only for a request to another row, once
the open row's hits are served; closed (`closed.py`) auto-precharges with a bank's last queued hit; open with a
cap (`open_cap.py`) lets a row serve at most `P_CAP` column commands while other rows wait; timeout
(`timeout.py`) also closes a row nobody waits for `P_TIMEOUT` cycles after its last column command."""
