package packets

import (
	"reflect"
	"testing"
)

// TestPropertiesIsZero sets each field of Properties in turn: IsZero
// must see every one, or Publish.Reset would leave a field of an earlier
// packet behind (a field added to Properties must be added there too).
func TestPropertiesIsZero(t *testing.T) {
	if p := (Properties{}); !p.IsZero() {
		t.Fatal("the zero Properties is not zero")
	}
	typ := reflect.TypeFor[Properties]()
	for i := range typ.NumField() {
		var p Properties
		f := reflect.ValueOf(&p).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 0, 0))
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(1)
		default:
			t.Fatalf("field %s of kind %s: teach this test to set it", typ.Field(i).Name, f.Kind())
		}
		if p.IsZero() {
			t.Errorf("IsZero misses %s", typ.Field(i).Name)
		}
	}
}

// TestPublishReset: a Publish with every field set comes back zero (a
// field added to Publish must be added to Reset too).
func TestPublishReset(t *testing.T) {
	p := Publish{Dup: true, QoS: 1, Retain: true, Topic: "t", PacketID: 7, Payload: []byte{}}
	p.Properties.ContentType = "c"
	p.Properties.User = []UserProperty{{Key: "k"}}
	v := reflect.ValueOf(&p).Elem()
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("field %s is not set by this test: set it", v.Type().Field(i).Name)
		}
	}
	p.Reset()
	if !reflect.DeepEqual(p, Publish{}) {
		t.Fatalf("after Reset: %+v", p)
	}
	q := Publish{Payload: []byte{}}
	q.Reset()
	if q.Payload != nil {
		t.Fatal("an empty, non-nil payload survived Reset")
	}
}
