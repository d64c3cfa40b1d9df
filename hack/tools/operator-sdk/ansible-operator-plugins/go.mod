module github.com/operator-framework/ansible-operator-plugins

go 1.26.3

require sigs.k8s.io/kubebuilder/v4 v4.6.0

require (
	github.com/gobuffalo/flect v1.0.3 // indirect
	github.com/kr/text v0.2.0 // indirect
	github.com/spf13/afero v1.14.0 // indirect
	github.com/spf13/pflag v1.0.6 // indirect
	golang.org/x/mod v0.24.0 // indirect
	golang.org/x/sync v0.14.0 // indirect
	golang.org/x/text v0.25.0 // indirect
	golang.org/x/tools v0.33.0 // indirect
	sigs.k8s.io/yaml v1.4.0 // indirect
)
