"""KEDA's external scaler contract (generated from proto/flux/keda/, vendored from KEDA; see its NOTICE)."""
