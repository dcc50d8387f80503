{{/* The release's full name, cut to a DNS label. */}}
{{- define "pagedock.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "pagedock.selectorLabels" -}}
app.kubernetes.io/name: pagedock-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pagedock.labels" -}}
{{ include "pagedock.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "pagedock.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "pagedock.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* What the operator does to LLMDeployments and their children: exactly these verbs. */}}
{{- define "pagedock.rules" -}}
- apiGroups: [pagedock.dev]
  resources: [llmdeployments]
  verbs: [get, list, watch, patch]
- apiGroups: [pagedock.dev]
  resources: [llmdeployments/status]
  verbs: [get, patch]
# ownerReferences with blockOwnerDeletion: true need update on the owner's finalizers subresource
# (the OwnerReferencesPermissionEnforcement admission plugin; no finalizer is ever written).
- apiGroups: [pagedock.dev]
  resources: [llmdeployments/finalizers]
  verbs: [update]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, patch, delete]
# The engine pods' failures (image pulls, crash loops, scheduling) go into status; the router
# pods' IPs are where the built-in autoscaler polls demand; patch: only the engine pods'
# controller.kubernetes.io/pod-deletion-cost annotation (cache-aware scale-down).
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, patch]
# configmaps: the engines' environment (<name>-engine) and the built-in autoscaler's windows
# (<name>-autoscaler, kept across operator restarts and leader changes).
- apiGroups: [""]
  resources: [configmaps, serviceaccounts]
  verbs: [get, create, patch, delete]
# hf:// models in model.cacheVolumeClaim: one download Job per revision (and one per LoRA adapter
# that must be put there); the claim's accessModes.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, create, patch, delete]
# Held only so that the operator may grant it to each router's Role (RBAC escalation rule).
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [ingresses, networkpolicies]
  verbs: [get, create, patch, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, create, patch, delete]
- apiGroups: [autoscaling]
  resources: [horizontalpodautoscalers]
  verbs: [get, create, patch, delete]
# spec.gateway: the Gateway API Inference Extension's pool and the route to it (their CRDs may be
# absent; the LLMDeployment's GatewayReady condition then names the missing one).
- apiGroups: [inference.networking.k8s.io]
  resources: [inferencepools]
  verbs: [get, create, patch, delete]
- apiGroups: [gateway.networking.k8s.io]
  resources: [httproutes]
  verbs: [get, create, patch, delete]
# autoscaling.mode keda (the ScaledObject is only created when KEDA's CRD is installed).
- apiGroups: [keda.sh]
  resources: [scaledobjects]
  verbs: [get, create, patch, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
- apiGroups: [kopf.dev]
  resources: [kopfpeerings]
  verbs: [get, list, watch, patch]
{{- end -}}
