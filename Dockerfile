# The image of kuberay-rayjob.yaml's pods: Ray's image with this checkout and the versions pinned in
# cluster-requirements.txt. The head and the MLflow server run the CPU build, the GPU workers the GPU build:
#   docker build -t REGISTRY/raco-bench:cpu --build-arg RAY_IMAGE=rayproject/ray:2.60.0-py311 .
#   docker build -t REGISTRY/raco-bench:gpu --build-arg RAY_IMAGE=rayproject/ray:2.60.0-py311-gpu .
ARG RAY_IMAGE=rayproject/ray:2.60.0-py311-gpu
FROM ${RAY_IMAGE}
COPY --chown=ray:users . /home/ray/raco-bench
RUN pip install --no-cache-dir -r /home/ray/raco-bench/cluster-requirements.txt -e /home/ray/raco-bench
WORKDIR /home/ray/raco-bench
