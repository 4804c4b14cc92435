"""``python -m core.check.helper FD``: a helper process of a parallel :func:`check_file`.

It reads ``(options, start, end, valid_path)`` as a pickle on stdin, checks that byte range
of the file and sends progress and its summary over the pipe ``FD``.
"""

import pickle
import sys
from multiprocessing.connection import Connection

from core.check.file_check import check_part


def main() -> None:
    conn = Connection(int(sys.argv[1]), readable=False)
    options, start, end, valid_path = pickle.load(sys.stdin.buffer)
    check_part(conn, options, start, end, valid_path)
    conn.close()


if __name__ == "__main__":
    main()
