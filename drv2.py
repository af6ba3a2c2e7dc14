import signal, sys, time
from ortools.sat.python import cp_model
def on_term(signum, frame):
    raise KeyboardInterrupt
signal.signal(signal.SIGTERM, on_term)
print("pid", flush=True)
time.sleep(3)
