"""The catalog's readers: pinned raw files to the table their schema file describes (``raco_bench/data/schemas/``).

A reader knows a dataset's raw files (upstream URL and sha256, :mod:`raco_bench.data.files`) and how to read the
verified files into one DataFrame: the label, group and feature columns as the schema file names them, rows in a
fixed order. It makes no choice the schema states (no domain, no class or group list). What it does do to the rows
(rows dropped, codes merged) is said in the schema's ``note``. A schema file names its reader (``reader:``) and the
reader's parameters (``reader_params:``); a user's table needs none (:func:`raco_bench.data.table.read_table`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from raco_bench.data import files
from raco_bench.data.files import RawFile

UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases"
GITHUB_RAW = "https://raw.githubusercontent.com"


@dataclass(frozen=True)
class Reader:
    files: Callable[..., tuple[RawFile, ...]]  # (reader params) -> the raw files
    read: Callable[..., pd.DataFrame]  # (verified paths, reader params) -> the table
    fetch: Callable[..., None] | None = None  # downloads files that have no URL of their own (folktables)


# ----------------------------------------------------------------------------------------- Adult
ADULT_COLUMNS = [
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
    "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week",
    "native-country", "income",
]


def _adult_files() -> tuple[RawFile, ...]:
    return (
        RawFile("adult/adult.data", "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d", f"{UCI}/adult/adult.data"),
        RawFile("adult/adult.test", "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05", f"{UCI}/adult/adult.test"),
    )


def _read_adult(paths: list[Path]) -> pd.DataFrame:
    """UCI train and test files, rows with a missing value dropped; the test file's labels lose their trailing '.'."""
    train = pd.read_csv(paths[0], header=None, names=ADULT_COLUMNS, skipinitialspace=True, na_values="?")
    test = pd.read_csv(paths[1], header=None, names=ADULT_COLUMNS, skipinitialspace=True, na_values="?", skiprows=1)
    df = pd.concat([train, test], ignore_index=True).dropna().reset_index(drop=True)
    df["income"] = df["income"].str.rstrip(".")
    return df


# ----------------------------------------------------------------------------------- Credit-Card
def _credit_files() -> tuple[RawFile, ...]:
    return (
        RawFile(
            "credit_default/default_of_credit_card_clients.tsv",
            "8c14eb1667cea74d666a1251a3048824cec9bd3c10e400fa964609104332b839",
            f"{GITHUB_RAW}/Lansform/credit-worthiness/c4feb9019a70e4011bfb1d8b2467451369dcad96/default%20of%20credit%20card%20clients.xls",
            how_to_obtain="this is a tab-separated export of UCI dataset 350 (default of credit card clients, Taiwan) despite its .xls name",
        ),
    )


def _read_credit(paths: list[Path]) -> pd.DataFrame:
    """The documented codes: EDUCATION {0, 4, 5, 6} and MARRIAGE 0 are merged into 'other' (4 and 3)."""
    df = pd.read_csv(paths[0], sep="\t")
    df["EDUCATION"] = df["EDUCATION"].where(df["EDUCATION"].isin([1, 2, 3]), 4)
    df["MARRIAGE"] = df["MARRIAGE"].where(df["MARRIAGE"] != 0, 3)
    return df


# ------------------------------------------------------------------------------------ Parkinsons
def _parkinsons_files() -> tuple[RawFile, ...]:
    return (
        RawFile(
            "parkinsons/parkinsons_updrs.data",
            "f2c7d5025dec4e92e7feae367a5f7ccf58789a10ac6b54bdf15976c599f9dd39",
            f"{GITHUB_RAW}/behnazrzf/Parkinson-s_Telemonitoring/f603774b38bfc967f20b4752bec4b6f872917d98/data/parkinsons_updrs.data",
            how_to_obtain="UCI dataset 189 (Parkinsons Telemonitoring)",
        ),
    )


def _read_csv(paths: list[Path]) -> pd.DataFrame:
    return pd.read_csv(paths[0])


# ----------------------------------------------------------------------------------------- Heart
def _heart_files() -> tuple[RawFile, ...]:
    return (
        RawFile(
            "heart_brfss2015/heart_disease_health_indicators_BRFSS2015.csv",
            "953fb23bb131736d7879539a071d3f6d1eaae8d4867ab05335d0ba89b94d5f99",
            "https://github.com/Daniel-Harrod13/Final-Project/raw/212ac889c9732256de2848b1fc44f458e406af7c/heart_disease_health_indicators_BRFSS2015.csv.zip",
            archive_member="heart_disease_health_indicators_BRFSS2015.csv",
            how_to_obtain="Kaggle dataset 'Heart Disease Health Indicators Dataset' (alexteboul), CDC BRFSS 2015",
        ),
    )


# ------------------------------------------------------------------------------------------- ACS
ACS_SAMPLE_SHA256 = {("2017", "1-Year"): "e5a07d45975c65974cb395ca839eafbc54036ce0bf1340aa4bb74c016108029d"}


def _acs_files(task: str = "employment", survey_year: str = "2017", horizon: str = "1-Year", state: str = "AL") -> tuple[RawFile, ...]:
    if state != "AL":
        raise ValueError(f"ACS state {state!r} is not supported yet; the benchmark uses Alabama (AL)")
    sha = ACS_SAMPLE_SHA256.get((str(survey_year), horizon))
    return (
        RawFile(
            f"acs/folktables_root/{survey_year}/{horizon}/psam_p01.csv", sha, None,
            how_to_obtain=(
                "with internet, folktables downloads the Census PUMS person file itself; offline, copy "
                "shared/data/acs (the 2017 1-Year Alabama 5,000-row sample, a substitute for the paper's "
                "2018 5-Year file)"
            ),
        ),
    )


def _acs_problem(task: str):
    import folktables

    return {"employment": folktables.ACSEmployment, "income": folktables.ACSIncome}[task]


def _read_acs(paths: list[Path], task: str = "employment", survey_year: str = "2017", horizon: str = "1-Year", state: str = "AL") -> pd.DataFrame:
    """folktables' task (features, its label as 0/1 in the task's target column, the group column RAC1P)."""
    import folktables

    root = paths[0].parents[2]
    source = folktables.ACSDataSource(survey_year=str(survey_year), horizon=horizon, survey="person", root_dir=str(root))
    df = source.get_data(states=["AL"], download=False)
    problem = _acs_problem(task)
    features, labels, groups = problem.df_to_pandas(df)
    table = features.drop(columns=[problem.group]).copy()
    table[problem.group] = groups.to_numpy().ravel().astype(np.int64)
    table[problem.target] = labels.to_numpy().ravel().astype(np.int64)
    return table


def _acs_fetch(task: str = "employment", survey_year: str = "2017", horizon: str = "1-Year", state: str = "AL") -> None:
    import folktables

    root = files.cache_root() / "acs" / "folktables_root"
    folktables.ACSDataSource(survey_year=str(survey_year), horizon=horizon, survey="person", root_dir=str(root)).get_data(
        states=["AL"], download=True
    )


# ------------------------------------------------------------------------------------- Synthetic
def _read_synthetic(paths: list[Path], rows: int = 3000, seed: int = 7) -> pd.DataFrame:
    """A small generated task whose constraints bind: the label depends on the features and on the group,
    and the groups are unbalanced (35 / 65). No file: the rows come from a seeded generator."""
    rng = np.random.default_rng(seed)
    group = (rng.uniform(size=rows) < 0.65).astype(np.int64)
    x = rng.normal(size=(rows, 4))
    colour = rng.choice(["red", "green", "blue"], size=rows, p=[0.5, 0.3, 0.2])
    logit = 1.2 * x[:, 0] - 0.8 * x[:, 1] + 0.5 * (colour == "red") + 1.0 * group - 0.6 + 0.3 * rng.normal(size=rows)
    return pd.DataFrame({**{f"x{i + 1}": x[:, i] for i in range(4)}, "colour": colour, "g": group, "y": (logit > 0).astype(np.int64)})


READERS: dict[str, Reader] = {
    "adult": Reader(lambda **_: _adult_files(), _read_adult),
    "credit": Reader(lambda **_: _credit_files(), _read_credit),
    "parkinsons": Reader(lambda **_: _parkinsons_files(), _read_csv),
    "heart": Reader(lambda **_: _heart_files(), _read_csv),
    "acs": Reader(_acs_files, _read_acs, _acs_fetch),
    "synthetic": Reader(lambda **_: (), _read_synthetic),
}


def get_reader(name: str) -> Reader:
    try:
        return READERS[name]
    except KeyError:
        raise ValueError(f"unknown reader {name!r}; the catalog's readers are {', '.join(READERS)} (a user's schema names its `table` instead)") from None


def read(name: str, params: dict, download: bool = True) -> pd.DataFrame:
    """The table of reader ``name``: its raw files found (or downloaded) and verified, then read."""
    reader = get_reader(name)
    raws = reader.files(**params)
    paths = []
    for raw in raws:
        if raw.url is None and reader.fetch is not None and files.find(raw) is None and download and not files.offline():
            reader.fetch(**params)  # folktables fetches from the Census
        paths.append(files.ensure(raw, download=download))
    return reader.read(paths, **params)
