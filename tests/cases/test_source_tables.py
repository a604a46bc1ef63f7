"""The shipped source case tables: row counts, provenance headers, and cells checked against the source text.

Cells are cited as `path:line` of the source file at the commit in the table's header (line 1 is the
source's own header line; the `#` provenance lines added here are not part of the source).
"""

import re
import shutil

import pytest

from mc2emu.arch.errors import ConstraintError
from mc2emu.cases import NO_TABLE, TABLES, NoSourceTable, SourceTablesMissing, available, load, source_cases_dir
from mc2emu.cases.source_tables import SourceTableCorrupt, git_blob_id

LO = ("libochao-huawei/ops-transformer", "5778144076def6311557939ab5cbfe8303f13e8f")
RA = ("recursion-ascend/ops-transformer", "a093e954a5a431b19fccf2cd92ef742c0500527c")
EXPECTED = {
    # op: (repo, full commit, rows, columns)
    "a2a": (
        *LO,
        7,
        ("m", "k", "n", "rank_num", "head_m_size"),
    ),
    "a2a_buffer_count": (
        "hicann/ops-transformer",
        "e349f211f1a0f514f229dc59f69fad120cabfe1f",
        7,
        ("m", "k", "n", "rank_num", "head_m_size", "buffer_count"),
    ),
    "ag": (*LO, 16, ("m", "k", "n", "rank_num")),
    "ag_urma": (
        "hicann/ops-transformer",
        "67a83540d75ec60a1809a5d672659b72c04022f9",
        9,
        ("m", "k", "n", "rank_num", "buffer_count"),
    ),
    "ag_ubmem": (*RA, 5, ("m", "k", "n", "rank_num")),
    "qmrs": (*RA, 6, ("m", "k", "n", "rank_num")),
    "gmm_mx": (*LO, 27, None),
}


def test_every_table_is_listed():
    assert set(available()) == set(EXPECTED)
    assert set(TABLES) == set(EXPECTED)


@pytest.mark.parametrize("op", sorted(EXPECTED))
def test_row_count_and_provenance(op):
    repo, commit, rows, columns = EXPECTED[op]
    table = load(op)
    assert len(table) == rows
    assert table.provenance.repo == repo
    assert table.provenance.commit == commit
    assert re.fullmatch(r"[0-9a-f]{40}", table.provenance.blob)
    assert table.provenance.verified
    assert table.provenance.path.endswith(".csv")
    if columns is not None:
        assert table.columns == columns
    assert all(len(row) == len(table.columns) for row in table.rows)


@pytest.mark.parametrize("op", sorted(EXPECTED))
def test_body_is_the_verified_blob(op):
    """The text after the `#` header is the source file itself: its git blob id is the one in the header."""
    raw = (source_cases_dir() / TABLES[op]).read_bytes()
    body = b"".join(ln for ln in raw.splitlines(keepends=True) if not ln.startswith(b"# "))
    assert git_blob_id(body) == load(op).provenance.blob


def test_a2a_cells():
    # libochao-huawei/ops-transformer@5778144076:
    #   mc2/common/op_kernel/apace/tests/st/all_to_all_quant_matmul/cases.csv:7-8
    t = load("a2a")
    assert t.rows[5] == ("4040", "8192", "4096", "4", "512")
    assert t.rows[6] == ("2048", "3584", "4096", "2", "256")
    # hicann/ops-transformer@e349f211:…/all_to_all_quant_matmul/cases.csv:4 (k 32768, head 1024, buffer_count 8)
    assert load("a2a_buffer_count").rows[2] == ("16384", "32768", "2048", "4", "1024", "8")


def test_ag_cells():
    # libochao-huawei/ops-transformer@5778144076:…/all_gather_quant_matmul/cases.csv:8-9 and :16-17
    t = load("ag")
    assert t.ints("m", "k", "n", "rank_num")[6:8] == [(8192, 4096, 2560, 4), (8205, 4096, 2560, 4)]
    assert t.ints("m", "n")[14:16] == [(8192, 6144), (8205, 6144)]
    assert set(t.column("k")) == {"4096"} and set(t.column("rank_num")) == {"4"}


def test_ag_urma_cells():
    # hicann/ops-transformer@67a83540:…/all_gather_quant_matmul/urma/cases.csv:8-10
    t = load("ag_urma")
    assert t.ints("m", "buffer_count")[6:] == [(8192, 0), (8192, 4), (8205, 4)]
    # :2 and :3, the first two rows: buffer_count 0 (no slot reuse) and 2
    assert t.records()[0] == {"m": "2048", "k": "4096", "n": "2560", "rank_num": "4", "buffer_count": "0"}
    assert t.records()[1]["buffer_count"] == "2"


def test_qmrs_and_ag_ubmem_cells():
    # recursion-ascend/ops-transformer@a093e954:…/quant_matmul_reduce_scatter/ubmem/cases.csv:2 and :7
    t = load("qmrs")
    assert t.ints("m", "k", "n", "rank_num")[0] == (126, 2560, 5120, 2)
    assert t.ints("m", "k", "n", "rank_num")[5] == (512, 8192, 8192, 4)
    # recursion-ascend/ops-transformer@a093e954:…/all_gather_quant_matmul/ubmem/cases.csv:2
    assert load("ag_ubmem").rows[0] == ("40", "512", "512", "2")


def test_gmm_cells():
    t = load("gmm_mx")
    assert t.columns[0] == "socVersion" and t.columns[-1] == "tilingData" and len(t.columns) == 24
    rec = {r["caseName"]: r for r in t.records()}
    # libochao-huawei/ops-transformer@5778144076:
    #   gmm/grouped_matmul/tests/ut/op_host/test_grouped_quant_arch35_tiling.csv:5
    nz = rec["mxfp8_weight_nz_notrans"]
    assert (nz["m"], nz["k"], nz["n"], nz["groupNum"], nz["weightFormat"]) == ("256", "1024", "512", "4", "NZ")
    assert nz["tilingData"] == "4 0 8 8 65793 0 256 512 1024 256 256 128 256 256 1024 1024 196864 0"
    # …test_grouped_quant_arch35_tiling.csv:29: FLOAT4_E1M2 weight, NZ, tiling succeeds with no golden words
    e1m2 = rec["fp4e1m2_weight_nz_success"]
    assert (e1m2["weightDtype"], e1m2["weightFormat"], e1m2["result"], e1m2["tilingData"]) == (
        "FLOAT4_E1M2",
        "NZ",
        "true",
        "",
    )
    # …:28: the same shape with an ND weight is refused
    assert rec["fp4e1m2_weight_nd_error"]["result"] == "false"
    # 26 MX rows (every row but the per-tensor fp8 one), 13 with a tilingData golden
    mx = [r for r in t.records() if r["scaleDtype"] == "FLOAT8-E8M0"]
    assert len(mx) == 26
    assert sum(1 for r in mx if r["tilingData"]) == 13


def test_no_table_ops_say_why():
    with pytest.raises(NoSourceTable, match="seed 001") as info:
        load("wqmm")
    assert isinstance(info.value, ConstraintError) and info.value.op == "wqmm"
    assert "wqmm" in NO_TABLE
    with pytest.raises(NoSourceTable, match="unknown op 'nope'"):
        load("nope")


def test_missing_directory_says_where(tmp_path):
    with pytest.raises(SourceTablesMissing, match=r"not in an installed wheel") as info:
        load("ag", root=tmp_path)
    assert str(tmp_path) in str(info.value)


def test_edited_table_is_refused(tmp_path):
    d = source_cases_dir(tmp_path)
    d.mkdir(parents=True)
    text = (source_cases_dir() / TABLES["ag"]).read_text()
    (d / TABLES["ag"]).write_text(text.replace("8205,4096,2560,4", "8205,4096,2560,8"))
    with pytest.raises(SourceTableCorrupt, match="edited after it was checked"):
        load("ag", root=tmp_path)
    shutil.copy(source_cases_dir() / TABLES["ag"], d / TABLES["ag"])
    assert len(load("ag", root=tmp_path)) == 16


def test_bad_header_is_refused(tmp_path):
    d = source_cases_dir(tmp_path)
    d.mkdir(parents=True)
    text = (source_cases_dir() / TABLES["qmrs"]).read_text()
    (d / TABLES["qmrs"]).write_text(text.replace("# blob:", "# sha:"))
    with pytest.raises(SourceTableCorrupt, match="known key"):
        load("qmrs", root=tmp_path)


def test_column_and_int_errors_name_the_rule():
    t = load("gmm_mx")
    with pytest.raises(ConstraintError, match="no column 'M'"):
        t.column("M")
    with pytest.raises(ConstraintError, match="not all integers"):
        t.ints("blockDim", "tilingData")
