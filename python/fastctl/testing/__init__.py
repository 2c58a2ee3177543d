"""Testing support: a real local Kubernetes control plane (etcd + kube-apiserver).

The full API lands with issue 4; this placeholder keeps the pytest entry point importable.
"""
