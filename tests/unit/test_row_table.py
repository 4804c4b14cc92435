"""core.row_table: rows found by a value of theirs, without an object per row."""

import pytest

from core.row_table import RowTable


def test_rows_whose_values_hash_alike_are_each_found_and_an_absent_value_is_not():
    values = [n * 1024 for n in range(100)]  # equal hashes modulo any table this size
    table = RowTable(len(values), values.__getitem__)
    for row in range(len(values)):
        table.add(row)
    assert [table.find(value) for value in values] == list(range(len(values)))
    assert table.find(5) is None and table.find(1024 * 100) is None


def test_only_the_rows_added_are_found():
    values = [b"k" * 16, b"j" * 16, b"k" * 15 + b"x"]
    table = RowTable(len(values), values.__getitem__)
    assert table.find(values[0]) is None  # empty
    table.add(2)
    assert table.find(values[2]) == 2 and table.find(values[0]) is None


def test_a_table_takes_no_more_rows_than_it_was_made_for():
    table = RowTable(2, lambda row: row)
    table.add(0)
    table.add(1)
    with pytest.raises(OverflowError):
        table.add(2)
