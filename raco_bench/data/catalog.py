"""The benchmark datasets as plugins: raw files, how to read them, and how to encode them.

Each :class:`DatasetSpec` knows its raw files (upstream URL and sha256) and a ``build`` function
that turns verified raw files into a :class:`~raco_bench.data.tabular.RawTable`, which splits and encodes itself under the
project protocol (:mod:`raco_bench.data.tabular`). The counts in :data:`EXPECTED` come from
``shared/data/MANIFEST.md`` and are checked by the tests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from raco_bench.data import files
from raco_bench.data.files import RawFile
from raco_bench.data.schema import CategoricalDomain, NumericDomain, PublicSchema, binary, codes
from raco_bench.data.tabular import RawTable, TabularDataset

UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases"
GITHUB_RAW = "https://raw.githubusercontent.com"

ADULT_COLUMNS = [
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
    "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week",
    "native-country", "income",
]
ADULT_NUMERIC = ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]
ADULT_CATEGORICAL = ["workclass", "education", "marital-status", "occupation", "relationship", "race", "native-country"]

_ADULT_NAMES = "UCI adult.names"
_CPS = "CPS top-coding of the 1994 Current Population Survey (the source of Adult)"
ADULT_SCHEMA = PublicSchema(
    numeric={
        "age": NumericDomain(17, 90, source=f"{_ADULT_NAMES} extraction rule AAGE>16; {_CPS}: age 90"),
        "fnlwgt": NumericDomain(0, 1.5e6, source="CPS final sampling weight; a priori bound 1.5 million"),
        "education-num": NumericDomain(1, 16, source=f"{_ADULT_NAMES}: 16 education levels"),
        "capital-gain": NumericDomain(0, 99999, log=True, source=f"{_CPS}: 99999"),
        "capital-loss": NumericDomain(0, 5000, log=True, source="a priori bound (annual deductible capital loss)"),
        "hours-per-week": NumericDomain(1, 99, source=f"{_CPS}: 99"),
    },
    categorical={
        "workclass": CategoricalDomain(("Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov", "State-gov",
                                        "Without-pay", "Never-worked"), _ADULT_NAMES),
        "education": CategoricalDomain(("Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm", "Assoc-voc",
                                        "9th", "7th-8th", "12th", "Masters", "1st-4th", "10th", "Doctorate", "5th-6th",
                                        "Preschool"), _ADULT_NAMES),
        "marital-status": CategoricalDomain(("Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
                                             "Married-spouse-absent", "Married-AF-spouse"), _ADULT_NAMES),
        "occupation": CategoricalDomain(("Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial",
                                         "Prof-specialty", "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical",
                                         "Farming-fishing", "Transport-moving", "Priv-house-serv", "Protective-serv",
                                         "Armed-Forces"), _ADULT_NAMES),
        "relationship": CategoricalDomain(("Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"), _ADULT_NAMES),
        "race": CategoricalDomain(("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"), _ADULT_NAMES),
        "native-country": CategoricalDomain((
            "United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany", "Outlying-US(Guam-USVI-etc)", "India",
            "Japan", "Greece", "South", "China", "Cuba", "Iran", "Honduras", "Philippines", "Italy", "Poland", "Jamaica",
            "Vietnam", "Mexico", "Portugal", "Ireland", "France", "Dominican-Republic", "Laos", "Ecuador", "Taiwan", "Haiti",
            "Columbia", "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand", "Yugoslavia", "El-Salvador",
            "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands"), _ADULT_NAMES),
    },
)

RAC1P_NAMES = (
    "White alone", "Black or African American alone", "American Indian alone", "Alaska Native alone",
    "American Indian and Alaska Native tribes specified", "Asian alone",
    "Native Hawaiian and Other Pacific Islander alone", "Some Other Race alone", "Two or More Races",
)


def _table(name: str, frame: pd.DataFrame, *, label, group, class_names, group_names, sensitive_attribute, categorical, numeric,
           schema, note: str = "", outside_budget: tuple[str, ...] = ()) -> RawTable:
    return RawTable(name, frame, label, group, tuple(class_names), tuple(group_names), sensitive_attribute, tuple(categorical),
                    tuple(numeric), schema, note, tuple(outside_budget))


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    description: str
    raw_files: Callable[..., tuple[RawFile, ...]]
    build: Callable[..., RawTable]  # verified raw files (and params) -> the table before encoding
    default_params: dict = field(default_factory=dict)

    def files(self, **params) -> tuple[RawFile, ...]:
        return self.raw_files(**{**self.default_params, **params})


# ----------------------------------------------------------------------------------------- Adult
def _adult_files() -> tuple[RawFile, ...]:
    return (
        RawFile("adult/adult.data", "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d", f"{UCI}/adult/adult.data"),
        RawFile("adult/adult.test", "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05", f"{UCI}/adult/adult.test"),
    )


def _build_adult(paths: list[Path]) -> RawTable:
    train = pd.read_csv(paths[0], header=None, names=ADULT_COLUMNS, skipinitialspace=True, na_values="?")
    test = pd.read_csv(paths[1], header=None, names=ADULT_COLUMNS, skipinitialspace=True, na_values="?", skiprows=1)
    df = pd.concat([train, test], ignore_index=True).dropna().reset_index(drop=True)
    income = df["income"].str.rstrip(".")
    groups = ("Female", "Male")
    return _table(
        "adult", df.drop(columns=["income", "sex"]),
        label=(income == ">50K").to_numpy().astype(np.int64),
        group=df["sex"].map({g: i for i, g in enumerate(groups)}).to_numpy(),
        class_names=("<=50K", ">50K"), group_names=groups, sensitive_attribute="sex",
        categorical=ADULT_CATEGORICAL, numeric=ADULT_NUMERIC,
        note="UCI train+test, rows with missing values dropped", schema=ADULT_SCHEMA,
    )


# ----------------------------------------------------------------------------------- Credit-Card
CREDIT_NUMERIC = ["LIMIT_BAL", "AGE"] + [f"BILL_AMT{i}" for i in range(1, 7)] + [f"PAY_AMT{i}" for i in range(1, 7)]
CREDIT_CATEGORICAL = ["EDUCATION", "MARRIAGE", "PAY_0", "PAY_2", "PAY_3", "PAY_4", "PAY_5", "PAY_6"]

_CREDIT_DOC = "UCI dataset 350 documentation (amounts in NT dollars)"
_PAY_LEVELS = tuple(str(v) for v in range(-2, 10))  # -2 no consumption, -1 paid duly, 0 revolving, 1..9 months of delay
CREDIT_SCHEMA = PublicSchema(
    numeric={
        "LIMIT_BAL": NumericDomain(0, 1e6, log=True, source=f"{_CREDIT_DOC}; a priori bound NT$1,000,000"),
        "AGE": NumericDomain(18, 100, source="adults; a priori bound 100 years"),
        **{f"BILL_AMT{i}": NumericDomain(-2e5, 1e6, source=f"{_CREDIT_DOC}; a priori bounds (credits make bills negative)") for i in range(1, 7)},
        **{f"PAY_AMT{i}": NumericDomain(0, 1e6, log=True, source=f"{_CREDIT_DOC}; a priori bound NT$1,000,000") for i in range(1, 7)},
    },
    categorical={
        "EDUCATION": CategoricalDomain(("1", "2", "3", "4"), f"{_CREDIT_DOC}: graduate school, university, high school, others"),
        "MARRIAGE": CategoricalDomain(("1", "2", "3"), f"{_CREDIT_DOC}: married, single, others"),
        **{c: CategoricalDomain(_PAY_LEVELS, f"{_CREDIT_DOC}: repayment status -2..9") for c in ["PAY_0", "PAY_2", "PAY_3", "PAY_4", "PAY_5", "PAY_6"]},
    },
)


def _credit_files() -> tuple[RawFile, ...]:
    return (
        RawFile(
            "credit_default/default_of_credit_card_clients.tsv",
            "8c14eb1667cea74d666a1251a3048824cec9bd3c10e400fa964609104332b839",
            f"{GITHUB_RAW}/Lansform/credit-worthiness/c4feb9019a70e4011bfb1d8b2467451369dcad96/default%20of%20credit%20card%20clients.xls",
            how_to_obtain="this is a tab-separated export of UCI dataset 350 (default of credit card clients, Taiwan) despite its .xls name",
        ),
    )


def _build_credit(paths: list[Path]) -> RawTable:
    df = pd.read_csv(paths[0], sep="\t")
    df["EDUCATION"] = df["EDUCATION"].where(df["EDUCATION"].isin([1, 2, 3]), 4)  # {0,4,5,6} -> other
    df["MARRIAGE"] = df["MARRIAGE"].where(df["MARRIAGE"] != 0, 3)  # 0 -> other
    label = df["default payment next month"].to_numpy()
    return _table(
        "credit", df.drop(columns=["ID", "SEX", "default payment next month"]),
        label=label, group=df["SEX"].to_numpy() - 1,
        class_names=("no default", "default"), group_names=("male", "female"), sensitive_attribute="SEX",
        categorical=CREDIT_CATEGORICAL, numeric=CREDIT_NUMERIC, schema=CREDIT_SCHEMA,
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


_VOICE = "a priori range of the acoustic measure (UCI dataset 189 documentation and the dysphonia literature)"
PARKINSONS_SCHEMA = PublicSchema(numeric={
    "age": NumericDomain(0, 100, source="a priori bound 100 years"),
    "test_time": NumericDomain(0, 250, source="days since recruitment in a six-month trial; a priori bound 250"),
    "motor_UPDRS": NumericDomain(0, 108, source="UPDRS part III scale maximum"),
    **{c: NumericDomain(0, 0.1, source=_VOICE) for c in ["Jitter(%)", "Jitter:RAP", "Jitter:PPQ5"]},
    "Jitter:DDP": NumericDomain(0, 0.3, source=_VOICE),
    "Jitter(Abs)": NumericDomain(0, 5e-4, source=f"{_VOICE}; seconds"),
    **{c: NumericDomain(0, 0.3, source=_VOICE) for c in ["Shimmer", "Shimmer:APQ3", "Shimmer:APQ5", "Shimmer:APQ11"]},
    "Shimmer:DDA": NumericDomain(0, 0.9, source=_VOICE),
    "Shimmer(dB)": NumericDomain(0, 3, source=f"{_VOICE}; decibels"),
    "NHR": NumericDomain(0, 1, source=f"{_VOICE}; a ratio"),
    "HNR": NumericDomain(0, 40, source=f"{_VOICE}; decibels"),
    **{c: NumericDomain(0, 1, source=f"{_VOICE}; normalised to [0, 1] by definition") for c in ["RPDE", "DFA", "PPE"]},
})


def _build_parkinsons(paths: list[Path]) -> RawTable:
    df = pd.read_csv(paths[0])
    threshold = float(df["total_UPDRS"].median())
    features = df.drop(columns=["subject#", "sex", "total_UPDRS"])
    return _table(
        "parkinsons", features,
        label=(df["total_UPDRS"] > threshold).to_numpy().astype(np.int64), group=df["sex"].to_numpy(),
        class_names=(f"total_UPDRS<={threshold:g}", f"total_UPDRS>{threshold:g}"), group_names=("male", "female"),
        sensitive_attribute="sex", categorical=[], numeric=list(features.columns),
        note="label: total_UPDRS above its median over all rows (the papers' label; the median is a statistic of the rows)",
        outside_budget=(f"task definition: the label threshold {threshold:g} is the median of total_UPDRS over all rows, "
                        "training rows included (the papers' label), OUTSIDE the privacy budget",),
        schema=PARKINSONS_SCHEMA,
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


_BRFSS = "CDC BRFSS 2015 codebook (as recoded in the Kaggle heart-disease indicators file)"
HEART_SCHEMA = PublicSchema(numeric={
    **{c: binary(_BRFSS) for c in ["HighBP", "HighChol", "CholCheck", "Smoker", "Stroke", "PhysActivity", "Fruits", "Veggies",
                                    "HvyAlcoholConsump", "AnyHealthcare", "NoDocbcCost", "DiffWalk"]},
    "BMI": NumericDomain(12, 100, source=f"{_BRFSS}: BMI reported up to 99.99"),
    "Diabetes": codes(0, 2, _BRFSS), "GenHlth": codes(1, 5, _BRFSS), "MentHlth": codes(0, 30, f"{_BRFSS}: days"),
    "PhysHlth": codes(0, 30, f"{_BRFSS}: days"), "Age": codes(1, 13, f"{_BRFSS}: 13 age bands"),
    "Education": codes(1, 6, _BRFSS), "Income": codes(1, 8, _BRFSS),
})


def _build_heart(paths: list[Path]) -> RawTable:
    df = pd.read_csv(paths[0])
    features = df.drop(columns=["HeartDiseaseorAttack", "Sex"])
    return _table(
        "heart", features,
        label=df["HeartDiseaseorAttack"].to_numpy().astype(np.int64), group=df["Sex"].to_numpy().astype(np.int64),
        class_names=("no heart disease", "heart disease or attack"), group_names=("female", "male"),
        sensitive_attribute="Sex", categorical=[], numeric=list(features.columns),
        schema=HEART_SCHEMA,
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


_PUMS = "ACS PUMS data dictionary (folktables codes missing values as -1)"
ACS_SCHEMA = PublicSchema(numeric={
    "AGEP": codes(0, 99, f"{_PUMS}: age top-coded at 99"), "SCHL": codes(-1, 24, _PUMS), "MAR": codes(1, 5, _PUMS),
    "RELP": codes(-1, 17, _PUMS), "DIS": codes(1, 2, _PUMS), "ESP": codes(-1, 8, _PUMS), "CIT": codes(1, 5, _PUMS),
    "MIG": codes(-1, 3, _PUMS), "MIL": codes(-1, 4, _PUMS), "ANC": codes(1, 8, _PUMS), "NATIVITY": codes(1, 2, _PUMS),
    "DEAR": codes(1, 2, _PUMS), "DEYE": codes(1, 2, _PUMS), "DREM": codes(-1, 2, _PUMS), "SEX": codes(1, 2, _PUMS),
    "COW": codes(-1, 9, _PUMS), "OCCP": codes(-1, 9920, _PUMS), "POBP": codes(-1, 554, _PUMS), "WKHP": codes(-1, 99, f"{_PUMS}: hours top-coded at 99"),
})


def _acs_task(task: str):
    import folktables

    return {"employment": folktables.ACSEmployment, "income": folktables.ACSIncome}[task]


def _build_acs(paths: list[Path], task: str, survey_year: str, horizon: str) -> RawTable:
    import folktables

    root = paths[0].parents[2]
    source = folktables.ACSDataSource(survey_year=str(survey_year), horizon=horizon, survey="person", root_dir=str(root))
    df = source.get_data(states=["AL"], download=False)
    problem = _acs_task(task)
    features, labels, groups = problem.df_to_pandas(df)
    sample = (str(survey_year), horizon) in ACS_SAMPLE_SHA256
    return _table(
        f"acs-{task}", features.drop(columns=[problem.group]),
        label=labels.to_numpy().ravel().astype(np.int64), group=groups.to_numpy().ravel().astype(np.int64) - 1,
        class_names=("no", "yes"), group_names=RAC1P_NAMES, sensitive_attribute="RAC1P",
        categorical=[], numeric=[c for c in features.columns if c != problem.group],
        schema=ACS_SCHEMA,
        note=(f"ACS {survey_year} {horizon} AL" + (" 5,000-row sample: a SUBSTITUTE, not comparable with the paper's 2018 5-Year numbers" if sample else "")),
    )


def _acs_download(survey_year: str, horizon: str) -> None:
    import folktables

    root = files.cache_root() / "acs" / "folktables_root"
    folktables.ACSDataSource(survey_year=str(survey_year), horizon=horizon, survey="person", root_dir=str(root)).get_data(
        states=["AL"], download=True
    )


# ------------------------------------------------------------------------------------- Synthetic
SYNTHETIC_SCHEMA = PublicSchema(
    numeric={f"x{i}": NumericDomain(-4.0, 4.0, source="generated: standard normal, clipped at ±4") for i in range(1, 5)},
    categorical={"colour": CategoricalDomain(("red", "green", "blue"), "generated")},
)


def _build_synthetic(paths: list[Path], rows: int = 3000, seed: int = 7) -> RawTable:
    """A small generated task whose constraints bind: the label depends on the features and on the group,
    and the groups are unbalanced (35 / 65). No file: the rows come from a seeded generator."""
    rng = np.random.default_rng(seed)
    group = (rng.uniform(size=rows) < 0.65).astype(np.int64)
    x = rng.normal(size=(rows, 4))
    colour = rng.choice(["red", "green", "blue"], size=rows, p=[0.5, 0.3, 0.2])
    logit = 1.2 * x[:, 0] - 0.8 * x[:, 1] + 0.5 * (colour == "red") + 1.0 * group - 0.6 + 0.3 * rng.normal(size=rows)
    frame = pd.DataFrame({**{f"x{i + 1}": x[:, i] for i in range(4)}, "colour": colour})
    return _table("synthetic", frame, label=(logit > 0).astype(np.int64), group=group, class_names=("no", "yes"),
                  group_names=("a", "b"), sensitive_attribute="g", categorical=["colour"], numeric=[f"x{i}" for i in range(1, 5)],
                  schema=SYNTHETIC_SCHEMA, note="generated (3,000 rows, seed 7): for conformance tests and quick checks")


DATASETS: dict[str, DatasetSpec] = {
    "adult": DatasetSpec("adult", "UCI Adult: income >50K, sensitive sex (2 groups)", lambda: _adult_files(), _build_adult),
    "credit": DatasetSpec("credit", "Default of credit card clients (Taiwan), sensitive SEX (2 groups)", lambda: _credit_files(), _build_credit),
    "parkinsons": DatasetSpec("parkinsons", "Parkinsons telemonitoring: total_UPDRS > median, sensitive sex", lambda: _parkinsons_files(), _build_parkinsons),
    "heart": DatasetSpec("heart", "Heart disease health indicators (BRFSS 2015), sensitive Sex", lambda: _heart_files(), _build_heart),
    "acs-employment": DatasetSpec(
        "acs-employment", "folktables ACSEmployment (AL), sensitive RAC1P (9 groups)", _acs_files,
        lambda paths, survey_year="2017", horizon="1-Year", state="AL": _build_acs(paths, "employment", survey_year, horizon),
        {"survey_year": "2017", "horizon": "1-Year", "state": "AL"},
    ),
    "acs-income": DatasetSpec(
        "acs-income", "folktables ACSIncome (AL), sensitive RAC1P (9 groups)", _acs_files,
        lambda paths, survey_year="2017", horizon="1-Year", state="AL": _build_acs(paths, "income", survey_year, horizon),
        {"survey_year": "2017", "horizon": "1-Year", "state": "AL"},
    ),
    "synthetic": DatasetSpec("synthetic", "generated 3,000-row task with unbalanced groups (no file)", lambda: (), _build_synthetic),
}

# Counts from shared/data/MANIFEST.md (rows after the loader's own filtering), with the papers' preprocessing.
# Public preprocessing differs only where the documented vocabulary has levels the rows lack
# (Adult: workclass=Never-worked, whose rows all miss occupation; Credit: PAY_x = 9).
EXPECTED_PUBLIC_FEATURES = {"adult": 103, "credit": 93}
EXPECTED = {
    "adult": {"rows": 45222, "features": 102, "groups": 2},
    "credit": {"rows": 30000, "features": 85, "groups": 2},
    "parkinsons": {"rows": 5875, "features": 19, "groups": 2},
    "heart": {"rows": 253680, "features": 20, "groups": 2},
    "acs-employment": {"rows": 5000, "features": 15, "groups": 9},
    "acs-income": {"rows": 2321, "features": 9, "groups": 9},
}

# Rows of the training split: the same for every split seed, since each (label, group) stratum holds out
# round(fraction × its size) rows (raco_bench.data.tabular.stratified_split). Known before loading, so a
# batch size that cannot fit is refused before any file is read; tests check them against the loaded data.
TRAIN_ROWS = {"adult": 28829, "credit": 19126, "parkinsons": 3745, "heart": 161722, "acs-employment": 3187, "acs-income": 1479,
              "synthetic": 1914}


def get_spec(name: str) -> DatasetSpec:
    try:
        return DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASETS)}") from None


def load_dataset(name: str, seed: int = 0, download: bool = True, preprocessing: str = "public", validation_split: int = 0,
                 **params) -> TabularDataset:
    """Load, verify and preprocess a benchmark dataset (see the module docstring).

    ``preprocessing``: ``"public"`` (default; feature domains from the catalog, no statistic of the
    rows) or ``"paper"`` (the papers' data-dependent z-scoring, outside the privacy budget).
    ``validation_split``: 0 for the protocol's train/validation split, r > 0 for its r-th resample with the same test
    split (a study's repeats, :func:`raco_bench.data.tabular.split_indices`).
    """
    from raco_bench.data.schema import PREPROCESSING_MODES

    if preprocessing not in PREPROCESSING_MODES:
        raise ValueError(f"invalid preprocessing={preprocessing!r}: choose one of {PREPROCESSING_MODES}")
    return load_table(name, download, **params).dataset(seed, preprocessing, validation_split=validation_split)


def load_table(name: str, download: bool = True, **params) -> RawTable:
    """The verified raw table of a benchmark dataset, before splitting and encoding."""
    spec = get_spec(name)
    params = {**spec.default_params, **params}
    paths = []
    for raw in spec.files(**params):
        if raw.url is None and name.startswith("acs-") and files.find(raw) is None and download and not files.offline():
            _acs_download(params["survey_year"], params["horizon"])  # folktables fetches from the Census
        paths.append(files.ensure(raw, download=download))
    return spec.build(paths, **params)


def provenance(ds: TabularDataset) -> tuple[str, str, dict]:
    """(digest, source, profile) of a loaded dataset, as a tracking store records it: the digest hashes its name, the
    catalog's parameters, the pinned checksums of its raw files, the split seed, the preprocessing and the split sizes
    (two runs with one digest read the same encoded rows); the source names the raw files; the profile gives the split
    sizes, features and groups."""
    import hashlib

    spec = DATASETS.get(ds.name)
    raws = spec.files() if spec is not None else ()
    seal = json.dumps({"name": ds.name, "params": spec.default_params if spec is not None else {}, "files": [r.sha256 for r in raws],
                       "split_seed": ds.split_seed, "preprocessing": ds.preprocessing,
                       **({"validation_split": ds.validation_split} if ds.validation_split else {}),
                       "sizes": [len(ds.train), len(ds.val), len(ds.test)], "features": list(ds.feature_names)}, sort_keys=True)
    digest = hashlib.sha256(seal.encode()).hexdigest()[:16]
    source = ", ".join(r.url or r.relpath for r in raws) or "generated (no file)"
    profile = {"train_rows": len(ds.train), "val_rows": len(ds.val), "test_rows": len(ds.test), "features": ds.n_features,
               "groups": list(ds.group_names), "sensitive_attribute": ds.sensitive_attribute, "split_seed": ds.split_seed,
               "validation_split": ds.validation_split, "preprocessing": ds.preprocessing}
    return digest, source, profile
