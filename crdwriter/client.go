package crdwriter

import (
	"context"
	"fmt"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"

	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
)

// objectClient is the little the writer asks of the API server about ProviderHealth objects.
// Every call goes straight to the API server: there is no cache or informer, and the writer
// keeps what it needs (the objects it last read or wrote) itself.
type objectClient interface {
	// List returns the objects that match the label selector.
	List(ctx context.Context, selector string) ([]v1alpha1.ProviderHealth, error)
	Get(ctx context.Context, name string) (*v1alpha1.ProviderHealth, error)
	Create(ctx context.Context, obj *v1alpha1.ProviderHealth) (*v1alpha1.ProviderHealth, error)
	// UpdateStatus writes obj.Status through the status subresource; obj.ResourceVersion must
	// be the one last read (a stale one gets a conflict).
	UpdateStatus(ctx context.Context, obj *v1alpha1.ProviderHealth) (*v1alpha1.ProviderHealth, error)
	// Delete deletes the object only when its UID is still uid and its resourceVersion still
	// rv (empty: any), so a delete decided on an old read never removes an object someone
	// recreated or wrote since.
	Delete(ctx context.Context, name string, uid types.UID, rv string) error
}

// scheme knows the ProviderHealth types, for the REST client and for Event references.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// requestTimeout bounds each request, so an API server that accepts connections but does not
// answer delays the writer, never blocks it.
const requestTimeout = 15 * time.Second

// restObjects is client-go's generic typed client of ProviderHealth objects, each call bounded
// by requestTimeout.
type restObjects struct {
	c *gentype.ClientWithList[*v1alpha1.ProviderHealth, *v1alpha1.ProviderHealthList]
}

func newRESTObjects(cfg *rest.Config, httpClient *http.Client) (*restObjects, error) {
	c := rest.CopyConfig(cfg)
	gv := v1alpha1.SchemeGroupVersion
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	rc, err := rest.RESTClientForConfigAndClient(c, httpClient)
	if err != nil {
		return nil, fmt.Errorf("building the ProviderHealth client: %w", err)
	}
	return &restObjects{c: gentype.NewClientWithList(v1alpha1.Resource, rc, metav1.ParameterCodec, "",
		func() *v1alpha1.ProviderHealth { return &v1alpha1.ProviderHealth{} },
		func() *v1alpha1.ProviderHealthList { return &v1alpha1.ProviderHealthList{} })}, nil
}

func (r *restObjects) List(ctx context.Context, selector string) ([]v1alpha1.ProviderHealth, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	list, err := r.c.List(ctx, metav1.ListOptions{LabelSelector: selector})
	return list.Items, err
}

func (r *restObjects) Get(ctx context.Context, name string) (*v1alpha1.ProviderHealth, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return r.c.Get(ctx, name, metav1.GetOptions{})
}

func (r *restObjects) Create(ctx context.Context, obj *v1alpha1.ProviderHealth) (*v1alpha1.ProviderHealth, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return r.c.Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager})
}

func (r *restObjects) UpdateStatus(ctx context.Context, obj *v1alpha1.ProviderHealth) (*v1alpha1.ProviderHealth, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return r.c.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: FieldManager})
}

func (r *restObjects) Delete(ctx context.Context, name string, uid types.UID, rv string) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	pre := &metav1.Preconditions{UID: &uid}
	if rv != "" {
		pre.ResourceVersion = &rv
	}
	return r.c.Delete(ctx, name, metav1.DeleteOptions{Preconditions: pre})
}
