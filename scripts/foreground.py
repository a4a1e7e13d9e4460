"""Run a command as the terminal's foreground process group, then give the terminal back.

`make run` starts scripts/run.sh from make. Ctrl-C goes to the terminal's foreground
process group, which is make's: make would die of the SIGINT (exit 130) even after
Relay stopped cleanly. Run in a process group of its own that holds the terminal, the
command alone gets Ctrl-C; it stops Relay and exits 0, and so does make."""
import os
import signal
import subprocess
import sys


def _interrupts_at_their_defaults() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def main() -> int:
    terminal = sys.stdin.fileno()
    before = os.tcgetpgrp(terminal)
    # Changing the foreground group from outside it would stop us with SIGTTOU.
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    # Ctrl-C at its defaults in the command, whatever this process inherited: a `make run`
    # started from a job that ignores SIGINT would hand that on, and a shell cannot trap
    # a signal ignored when it started, so run.sh would never hear the Ctrl-C it is for.
    child = subprocess.Popen(sys.argv[1:], process_group=0, preexec_fn=_interrupts_at_their_defaults)
    try:
        os.tcsetpgrp(terminal, child.pid)
    except OSError:
        pass  # not our terminal to hand over: run as we are
    try:
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:
                continue  # a Ctrl-C that reached us too: the child handles it
    finally:
        try:
            os.tcsetpgrp(terminal, before)
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main())
