"""The benchmark datasets as plugins: raw files, how to read them, and how to encode them.

Each :class:`DatasetSpec` knows its raw files (upstream URL and sha256) and a ``build`` function
that turns verified raw files into a :class:`~raco_bench.data.tabular.TabularDataset` under the
project protocol (:mod:`raco_bench.data.tabular`). The counts in :data:`EXPECTED` come from
``shared/data/MANIFEST.md`` and are checked by the tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from raco_bench.data import files
from raco_bench.data.files import RawFile
from raco_bench.data.tabular import TabularDataset, build_dataset

UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases"
GITHUB_RAW = "https://raw.githubusercontent.com"

ADULT_COLUMNS = [
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
    "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week",
    "native-country", "income",
]
ADULT_NUMERIC = ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]
ADULT_CATEGORICAL = ["workclass", "education", "marital-status", "occupation", "relationship", "race", "native-country"]

RAC1P_NAMES = (
    "White alone", "Black or African American alone", "American Indian alone", "Alaska Native alone",
    "American Indian and Alaska Native tribes specified", "Asian alone",
    "Native Hawaiian and Other Pacific Islander alone", "Some Other Race alone", "Two or More Races",
)


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    description: str
    raw_files: Callable[..., tuple[RawFile, ...]]
    build: Callable[..., TabularDataset]
    default_params: dict = field(default_factory=dict)

    def files(self, **params) -> tuple[RawFile, ...]:
        return self.raw_files(**{**self.default_params, **params})


# ----------------------------------------------------------------------------------------- Adult
def _adult_files() -> tuple[RawFile, ...]:
    return (
        RawFile("adult/adult.data", "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d", f"{UCI}/adult/adult.data"),
        RawFile("adult/adult.test", "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05", f"{UCI}/adult/adult.test"),
    )


def _build_adult(paths: list[Path], seed: int) -> TabularDataset:
    train = pd.read_csv(paths[0], header=None, names=ADULT_COLUMNS, skipinitialspace=True, na_values="?")
    test = pd.read_csv(paths[1], header=None, names=ADULT_COLUMNS, skipinitialspace=True, na_values="?", skiprows=1)
    df = pd.concat([train, test], ignore_index=True).dropna().reset_index(drop=True)
    income = df["income"].str.rstrip(".")
    groups = ("Female", "Male")
    return build_dataset(
        "adult", df.drop(columns=["income", "sex"]),
        label=(income == ">50K").to_numpy().astype(np.int64),
        group=df["sex"].map({g: i for i, g in enumerate(groups)}).to_numpy(),
        class_names=("<=50K", ">50K"), group_names=groups, sensitive_attribute="sex",
        categorical=ADULT_CATEGORICAL, numeric=ADULT_NUMERIC, seed=seed,
        note="UCI train+test, rows with missing values dropped",
    )


# ----------------------------------------------------------------------------------- Credit-Card
CREDIT_NUMERIC = ["LIMIT_BAL", "AGE"] + [f"BILL_AMT{i}" for i in range(1, 7)] + [f"PAY_AMT{i}" for i in range(1, 7)]
CREDIT_CATEGORICAL = ["EDUCATION", "MARRIAGE", "PAY_0", "PAY_2", "PAY_3", "PAY_4", "PAY_5", "PAY_6"]


def _credit_files() -> tuple[RawFile, ...]:
    return (
        RawFile(
            "credit_default/default_of_credit_card_clients.tsv",
            "8c14eb1667cea74d666a1251a3048824cec9bd3c10e400fa964609104332b839",
            f"{GITHUB_RAW}/Lansform/credit-worthiness/c4feb9019a70e4011bfb1d8b2467451369dcad96/default%20of%20credit%20card%20clients.xls",
            how_to_obtain="this is a tab-separated export of UCI dataset 350 (default of credit card clients, Taiwan) despite its .xls name",
        ),
    )


def _build_credit(paths: list[Path], seed: int) -> TabularDataset:
    df = pd.read_csv(paths[0], sep="\t")
    df["EDUCATION"] = df["EDUCATION"].where(df["EDUCATION"].isin([1, 2, 3]), 4)  # {0,4,5,6} -> other
    df["MARRIAGE"] = df["MARRIAGE"].where(df["MARRIAGE"] != 0, 3)  # 0 -> other
    label = df["default payment next month"].to_numpy()
    return build_dataset(
        "credit", df.drop(columns=["ID", "SEX", "default payment next month"]),
        label=label, group=df["SEX"].to_numpy() - 1,
        class_names=("no default", "default"), group_names=("male", "female"), sensitive_attribute="SEX",
        categorical=CREDIT_CATEGORICAL, numeric=CREDIT_NUMERIC, seed=seed,
        note="Taiwan default of credit card clients (Q20); EDUCATION {0,4,5,6} and MARRIAGE 0 merged into 'other'",
    )


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


def _build_parkinsons(paths: list[Path], seed: int) -> TabularDataset:
    df = pd.read_csv(paths[0])
    threshold = float(df["total_UPDRS"].median())
    features = df.drop(columns=["subject#", "sex", "total_UPDRS"])
    return build_dataset(
        "parkinsons", features,
        label=(df["total_UPDRS"] > threshold).to_numpy().astype(np.int64), group=df["sex"].to_numpy(),
        class_names=(f"total_UPDRS<={threshold:g}", f"total_UPDRS>{threshold:g}"), group_names=("male", "female"),
        sensitive_attribute="sex", categorical=[], numeric=list(features.columns), seed=seed,
        note="label: total_UPDRS above its median over all rows",
    )


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


def _build_heart(paths: list[Path], seed: int) -> TabularDataset:
    df = pd.read_csv(paths[0])
    features = df.drop(columns=["HeartDiseaseorAttack", "Sex"])
    return build_dataset(
        "heart", features,
        label=df["HeartDiseaseorAttack"].to_numpy().astype(np.int64), group=df["Sex"].to_numpy().astype(np.int64),
        class_names=("no heart disease", "heart disease or attack"), group_names=("female", "male"),
        sensitive_attribute="Sex", categorical=[], numeric=list(features.columns), seed=seed,
    )


# ------------------------------------------------------------------------------------------- ACS
ACS_SAMPLE_SHA256 = {("2017", "1-Year"): "e5a07d45975c65974cb395ca839eafbc54036ce0bf1340aa4bb74c016108029d"}


def _acs_files(survey_year: str = "2017", horizon: str = "1-Year", state: str = "AL") -> tuple[RawFile, ...]:
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


def _acs_task(task: str):
    import folktables

    return {"employment": folktables.ACSEmployment, "income": folktables.ACSIncome}[task]


def _build_acs(paths: list[Path], seed: int, task: str, survey_year: str, horizon: str) -> TabularDataset:
    import folktables

    root = paths[0].parents[2]
    source = folktables.ACSDataSource(survey_year=str(survey_year), horizon=horizon, survey="person", root_dir=str(root))
    df = source.get_data(states=["AL"], download=False)
    problem = _acs_task(task)
    features, labels, groups = problem.df_to_pandas(df)
    sample = (str(survey_year), horizon) in ACS_SAMPLE_SHA256
    return build_dataset(
        f"acs-{task}", features.drop(columns=[problem.group]),
        label=labels.to_numpy().ravel().astype(np.int64), group=groups.to_numpy().ravel().astype(np.int64) - 1,
        class_names=("no", "yes"), group_names=RAC1P_NAMES, sensitive_attribute="RAC1P",
        categorical=[], numeric=[c for c in features.columns if c != problem.group], seed=seed,
        note=(f"ACS {survey_year} {horizon} AL" + (" 5,000-row sample: a SUBSTITUTE, not comparable with the paper's 2018 5-Year numbers" if sample else "")),
    )


def _acs_download(survey_year: str, horizon: str) -> None:
    import folktables

    root = files.cache_root() / "acs" / "folktables_root"
    folktables.ACSDataSource(survey_year=str(survey_year), horizon=horizon, survey="person", root_dir=str(root)).get_data(
        states=["AL"], download=True
    )


DATASETS: dict[str, DatasetSpec] = {
    "adult": DatasetSpec("adult", "UCI Adult: income >50K, sensitive sex (2 groups)", lambda: _adult_files(), _build_adult),
    "credit": DatasetSpec("credit", "Default of credit card clients (Taiwan), sensitive SEX (2 groups)", lambda: _credit_files(), _build_credit),
    "parkinsons": DatasetSpec("parkinsons", "Parkinsons telemonitoring: total_UPDRS > median, sensitive sex", lambda: _parkinsons_files(), _build_parkinsons),
    "heart": DatasetSpec("heart", "Heart disease health indicators (BRFSS 2015), sensitive Sex", lambda: _heart_files(), _build_heart),
    "acs-employment": DatasetSpec(
        "acs-employment", "folktables ACSEmployment (AL), sensitive RAC1P (9 groups)", _acs_files,
        lambda paths, seed, survey_year="2017", horizon="1-Year", state="AL": _build_acs(paths, seed, "employment", survey_year, horizon),
        {"survey_year": "2017", "horizon": "1-Year", "state": "AL"},
    ),
    "acs-income": DatasetSpec(
        "acs-income", "folktables ACSIncome (AL), sensitive RAC1P (9 groups)", _acs_files,
        lambda paths, seed, survey_year="2017", horizon="1-Year", state="AL": _build_acs(paths, seed, "income", survey_year, horizon),
        {"survey_year": "2017", "horizon": "1-Year", "state": "AL"},
    ),
}

# Counts from shared/data/MANIFEST.md (rows after the loader's own filtering).
EXPECTED = {
    "adult": {"rows": 45222, "features": 102, "groups": 2},
    "credit": {"rows": 30000, "features": 85, "groups": 2},
    "parkinsons": {"rows": 5875, "features": 19, "groups": 2},
    "heart": {"rows": 253680, "features": 20, "groups": 2},
    "acs-employment": {"rows": 5000, "features": 15, "groups": 9},
    "acs-income": {"rows": 2321, "features": 9, "groups": 9},
}


def get_spec(name: str) -> DatasetSpec:
    try:
        return DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASETS)}") from None


def load_dataset(name: str, seed: int = 0, download: bool = True, **params) -> TabularDataset:
    """Load, verify and preprocess a benchmark dataset (see the module docstring)."""
    spec = get_spec(name)
    params = {**spec.default_params, **params}
    paths = []
    for raw in spec.files(**params):
        if raw.url is None and name.startswith("acs-") and files.find(raw) is None and download and not files.offline():
            _acs_download(params["survey_year"], params["horizon"])  # folktables fetches from the Census
        paths.append(files.ensure(raw, download=download))
    return spec.build(paths, seed, **params)
