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
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/pager"

	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
)

// objectClient is the little the writer asks of the API server about ProviderHealth objects.
// Every call goes straight to the API server: there is no cache or informer, and the writer
// keeps what it needs (the objects it last read or wrote) itself.
type objectClient interface {
	// List returns the objects that match the label selector, read in pages.
	List(ctx context.Context, selector string) ([]v1alpha1.ProviderHealth, error)
	// ListMeta returns the metadata (no status) of the objects that match the label selector,
	// read in pages.
	ListMeta(ctx context.Context, selector string) ([]metav1.ObjectMeta, error)
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

// FieldManager is the one field manager of every write, and the Events' source component.
const FieldManager = "provider-health-exporter"

// Page sizes of lists: a full object holds up to 256 targets (tens of kilobytes), its metadata
// a few hundred bytes.
const (
	listPageSize     = 50
	listMetaPageSize = 500
)

// restObjects is client-go's generic typed client of ProviderHealth objects and its metadata
// client, each call (each page of a list) bounded by requestTimeout.
type restObjects struct {
	c    *gentype.ClientWithList[*v1alpha1.ProviderHealth, *v1alpha1.ProviderHealthList]
	meta metadata.ResourceInterface
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
	mc, err := metadata.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("building the ProviderHealth metadata client: %w", err)
	}
	return &restObjects{
		c: gentype.NewClientWithList(v1alpha1.Resource, rc, metav1.ParameterCodec, "",
			func() *v1alpha1.ProviderHealth { return &v1alpha1.ProviderHealth{} },
			func() *v1alpha1.ProviderHealthList { return &v1alpha1.ProviderHealthList{} }),
		meta: mc.Resource(v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.Resource)),
	}, nil
}

func (r *restObjects) List(ctx context.Context, selector string) ([]v1alpha1.ProviderHealth, error) {
	var items []v1alpha1.ProviderHealth
	err := eachPage(ctx, listPageSize, selector, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return r.c.List(ctx, opts)
	}, func(o runtime.Object) error {
		items = append(items, *o.(*v1alpha1.ProviderHealth))
		return nil
	})
	return items, err
}

func (r *restObjects) ListMeta(ctx context.Context, selector string) ([]metav1.ObjectMeta, error) {
	var items []metav1.ObjectMeta
	err := eachPage(ctx, listMetaPageSize, selector, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return r.meta.List(ctx, opts)
	}, func(o runtime.Object) error {
		items = append(items, o.(*metav1.PartialObjectMetadata).ObjectMeta)
		return nil
	})
	return items, err
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

// eachPage lists in pages of size with client-go's pager (which falls back to one full list
// when a continue token has expired), calling each for every item.
func eachPage(ctx context.Context, size int64, selector string, page pager.ListPageFunc, each func(runtime.Object) error) error {
	p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		return page(ctx, opts)
	})
	p.PageSize = size
	return p.EachListItem(ctx, metav1.ListOptions{LabelSelector: selector}, each)
}
