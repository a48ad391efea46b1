"""imagekit.k8s.options: the names and labels every Kubernetes writer's options are checked by, one
pattern each (the Job writer and validate-on refused DNS labels through two copies of one regex)."""

from __future__ import annotations

import pytest

from imagekit.core.errors import InputError
from imagekit.k8s.options import Toleration, check_dns_labels, parse_node_selector


def test_a_dns_label_is_checked_for_each_flag_in_one_line() -> None:
    check_dns_labels((("--namespace", "ml-jobs"), ("--runtime-class", None)))
    for bad in ("ML", "-a", "a-", "a_b", "a" * 64, ""):
        with pytest.raises(InputError, match=r"^--secret .*: not a DNS label"):
            check_dns_labels((("--namespace", "ok"), ("--secret", bad)))


def test_a_node_selectors_value_may_be_empty_but_not_over_63_characters() -> None:
    assert parse_node_selector(["pool=", "zone=a.b_c-1"]) == (("pool", ""), ("zone", "a.b_c-1"))
    for bad in ("pool=" + "a" * 64, "pool=-a", "pool"):
        with pytest.raises(InputError, match="--node-selector"):
            parse_node_selector([bad])


def test_a_tolerations_value_given_with_equals_is_a_label_value() -> None:
    assert Toleration.parse("team=ml:NoSchedule").value == "ml"
    with pytest.raises(InputError, match="not a valid label value"):
        Toleration.parse("team=:NoSchedule")
