"""report/labels.py: the web page's and the HTML report's names and units (issue 18 item 6: labels were
JSON keys such as "step time s" and "mfu", numbers printed as 4.787e+04)."""

from __future__ import annotations

from gpuplan.report.labels import field_label as label
from gpuplan.report.labels import value_text


def test_labels_are_words_without_units() -> None:
    assert label("step_time_s") == "step time"
    assert label("mfu").startswith("MFU")
    assert label("peak_allocated_bytes") == "peak allocated"
    assert label("tokens_per_s") == "tokens per second"
    assert label("batch_size") == "batch size"


def test_values_carry_units_and_never_exponents() -> None:
    assert value_text("step_time_s", 0.324997) == ("325.0 ms", True)
    assert value_text("samples_per_s", 47870.3) == ("47,870 /s", True)
    assert value_text("peak_allocated_bytes", 3 * 2**30) == ("3.00 GiB", True)
    assert value_text("mfu", 0.4123) == ("41.2 %", True)
    assert value_text("fits", True) == ("yes", False)
    assert value_text("ratio", 47870.3)[0] == "47,870" and "e+" not in value_text("x", 1.5e7)[0]
    assert value_text("lora_targets", ["q_proj", "v_proj"]) == ("q_proj, v_proj", False)
