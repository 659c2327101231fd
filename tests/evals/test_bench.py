"""Benchmark loading (our CSVs and STaRK's layout), split selection and answer-key coverage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.bench import check_answers, load_bench, read_questions
from graphs.errors import LoaderError, SKBError
from tests.paths import REPO

SHARED = REPO.parent / "shared"
HPO_DEV = SHARED / "bench" / "hpo_cases_dev.csv"
PRIMEKG = SHARED / "stark_qa" / "primekg"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_answers_normalised_to_strings_and_extra_columns_kept(tmp_path: Path) -> None:
    csv = _write(tmp_path / "b.csv", 'id,query,answer_ids,target_type,style,case_id\n'
                 '1,q one,"[18423, 7]",disease,names,C1\n'
                 '2,q two,"[""OMIM:101200""]",gene,,C2\n'
                 "3,q three,\"['FGFR2', 'FGFR2']\",,,\n")
    questions = read_questions(csv)
    assert [q.answer_ids for q in questions] == [["18423", "7"], ["OMIM:101200"], ["FGFR2"]]
    assert questions[0].target_type == "disease" and questions[0].style == "names"
    assert questions[1].style is None and questions[2].target_type is None
    assert questions[0].extra == {"case_id": "C1"}
    assert questions[0].group("case_id") == "C1"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("id,query\n1,q\n", "missing column"),
        ("id,query,answer_ids\n1,q,not-json\n", "not a JSON list"),
        ("id,query,answer_ids\n1,q,[]\n", "answer_ids is empty"),
        ('id,query,answer_ids\n1,q,"[1]"\n1,r,"[2]"\n', "duplicate id"),
        ('id,query,answer_ids\n1,,"[1]"\n', "empty query"),
        ('id,query,answer_ids\n1,q,"[{""a"": 1}]"\n', "list of ints or strings"),
        ("id,query,answer_ids\n", "no questions"),
    ],
)
def test_bad_bench_files_name_the_problem(tmp_path: Path, body: str, message: str) -> None:
    csv = _write(tmp_path / "bad.csv", body)
    with pytest.raises(LoaderError, match=message) as info:
        read_questions(csv)
    assert str(csv) in str(info.value)
    assert isinstance(info.value, SKBError)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LoaderError, match="not found"):
        load_bench(tmp_path / "nope.csv")


def _stark_layout(root: Path) -> Path:
    _write(root / "stark_qa" / "stark_qa.csv",
           'id,query,answer_ids\n10,a,[1]\n11,b,"[2, 3]"\n12,c,[4]\n13,d,[5]\n')
    _write(root / "split" / "test.index", "13\n11\n99\n")
    _write(root / "split" / "train.index", "10\n12\n")
    return root


def test_stark_directory_and_split_selection(tmp_path: Path) -> None:
    root = _stark_layout(tmp_path / "ds")
    bench = load_bench(root, split="test")
    assert [q.id for q in bench.questions] == ["13", "11"], "split order, unknown ids skipped"
    assert bench.split_ids_missing == 1
    assert [q.id for q in load_bench(root / "stark_qa" / "stark_qa.csv", split="train").questions] == ["10", "12"]
    assert len(load_bench(root).questions) == 4
    assert [q.id for q in load_bench(root, split=str(root / "split" / "train.index"), limit=1).questions] == ["10"]
    with pytest.raises(LoaderError, match="no split/val.index"):
        load_bench(root, split="val")
    with pytest.raises(LoaderError, match="unknown split"):
        load_bench(root, split="dev")


def test_check_answers_counts_unknown_and_flags_unanswerable(tmp_path: Path) -> None:
    csv = _write(tmp_path / "b.csv", 'id,query,answer_ids\n1,a,"[""K1"", ""X1""]"\n2,b,"[""X2""]"\n3,c,"[""K2""]"\n'
                 '4,d,"[""X2"", ""X3""]"\n')
    coverage = check_answers(read_questions(csv), {"K1": 1, "K2": 2})
    assert coverage.unknown_count == 4
    assert coverage.n_answer_keys == 6
    assert coverage.unknown_examples == ["X1", "X2", "X3"]
    assert coverage.all_unknown_questions == ["2", "4"]
    assert coverage.partly_unknown_questions == 1


@pytest.mark.skipif(not HPO_DEV.is_file(), reason="shared bench not present")
def test_real_hpo_dev_bench_loads() -> None:
    bench = load_bench(HPO_DEV)
    assert len(bench.questions) == 1236
    assert {q.target_type for q in bench.questions} == {"disease", "gene"}
    assert all(q.extra.get("case_id") for q in bench.questions)
    assert bench.questions[0].answer_ids == ["OMIM:101200"]


@pytest.mark.skipif(not PRIMEKG.is_dir(), reason="shared STaRK files not present")
def test_real_stark_primekg_test_split_loads() -> None:
    bench = load_bench(PRIMEKG, split="test")
    split_ids = [line for line in (PRIMEKG / "split" / "test.index").read_text().split() if line]
    assert len(bench.questions) + bench.split_ids_missing == len(split_ids)
    assert len(bench.questions) > 2000
    assert all(a.isdigit() for q in bench.questions for a in q.answer_ids)
    first = bench.questions[0]
    assert first.id == split_ids[0]
    assert json.dumps(first.answer_ids)
