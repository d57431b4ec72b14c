"""The pre-flight client speaks the pipeline's security settings (no broker needed)."""

from __future__ import annotations

import pytest

from ingest.kafka import admin
from ingest.spec.model import KafkaSource, frozen_map


def source(**options: str) -> KafkaSource:
    return KafkaSource(bootstrap_servers="broker:9093", topics=("orders",), options=frozen_map(options))


def test_every_client_setting_is_passed_through():
    config = admin.client_config(source(**{
        "security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI",
        "sasl.kerberos.service.name": "kafka", "ssl.ca.location": "/etc/ca.pem",
        "client.id": "ingest-orders", "socket.connection.setup.timeout.ms": "20000"}))
    assert config == {"bootstrap.servers": "broker:9093", "security.protocol": "SASL_SSL",
                      "sasl.mechanism": "GSSAPI", "sasl.kerberos.service.name": "kafka",
                      "ssl.ca.location": "/etc/ca.pem", "client.id": "ingest-orders",
                      "socket.connection.setup.timeout.ms": "20000"}


@pytest.mark.parametrize("jaas, expected", [
    ('org.apache.kafka.common.security.scram.ScramLoginModule required username="ingest" '
     'password="p\\"w";', {"sasl.username": "ingest", "sasl.password": 'p"w'}),
    ('com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true '
     'keyTab="/etc/ingest.keytab" principal="ingest@EXAMPLE.COM";',
     {"sasl.kerberos.keytab": "/etc/ingest.keytab", "sasl.kerberos.principal": "ingest@EXAMPLE.COM"}),
    ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
     'clientId="ingest" clientSecret="s3cret" scope="kafka";',
     {"sasl.oauthbearer.client.id": "ingest", "sasl.oauthbearer.client.secret": "s3cret",
      "sasl.oauthbearer.scope": "kafka", "sasl.oauthbearer.method": "oidc"}),
])
def test_the_jaas_line_becomes_librdkafka_settings(jaas, expected):
    config = admin.client_config(source(**{"sasl.jaas.config": jaas}))
    assert config == {"bootstrap.servers": "broker:9093", **expected}


def test_java_only_settings_are_left_to_the_java_client():
    config = admin.client_config(source(**{
        "sasl.login.callback.handler.class": "software.amazon.msk.auth.iam.IAMClientCallbackHandler",
        "ssl.truststore.location": "/etc/truststore.jks", "ssl.endpoint.identification.algorithm": ""}))
    assert config == {"bootstrap.servers": "broker:9093", "ssl.endpoint.identification.algorithm": "none"}


def test_a_setting_librdkafka_does_not_know_is_dropped_not_fatal():
    consumer = admin._consumer(source(**{"default.api.timeout.ms": "60000",
                                         "metadata.max.age.ms": "30000"}), [])
    consumer.close()  # created: the unknown Java setting was left out, the known one kept


def test_a_value_librdkafka_refuses_names_the_way_out():
    with pytest.raises(admin.BrokerUnreachable, match="--no-preflight"):
        admin._consumer(source(**{"security.protocol": "KERBEROS"}), [])
