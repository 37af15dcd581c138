package dev.joiner.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;

/**
 * The Kafka Streams contestant of scripts/bench: KStream(notifications) left
 * join KTable(market), emitting the alert JSON joiner writes (result "local"
 * or "miss", worker "kstreams"). Default settings (at-least-once, or the
 * processing.guarantee given), one stream thread. Each record's timestamp is attached to its value first, since a
 * ValueJoiner does not see timestamps (notification_ts_ms, price_ts_ms).
 *
 * <p>Arguments: brokers application-id market-topic notifications-topic
 * alerts-topic [processing-guarantee: at_least_once (the default) or
 * exactly_once_v2, whose commit interval is then Kafka Streams' 100 ms
 * default under exactly-once]. Prints "ready UNIX_MS" on stdout when the instance is
 * RUNNING; stops cleanly on SIGTERM.
 */
public final class KStreamsPeer {
  private static final ObjectMapper JSON = new ObjectMapper();

  /** Prefixes a value with its record timestamp: "TS|VALUE". */
  static final class WithTimestamp implements FixedKeyProcessor<String, String, String> {
    private FixedKeyProcessorContext<String, String> ctx;

    @Override
    public void init(FixedKeyProcessorContext<String, String> context) {
      ctx = context;
    }

    @Override
    public void process(FixedKeyRecord<String, String> r) {
      ctx.forward(r.withValue(r.timestamp() + "|" + r.value()));
    }
  }

  static String alert(String notification, String tick) {
    try {
      int bar = notification.indexOf('|');
      long nts = Long.parseLong(notification.substring(0, bar));
      JsonNode n = JSON.readTree(notification.substring(bar + 1));
      if (n == null || !n.isObject() || !n.path("id").isTextual() || !n.path("symbol").isTextual()) {
        return null; // joiner would dead-letter it
      }
      ObjectNode a = JSON.createObjectNode();
      a.put("id", n.get("id").asText());
      if (n.path("user").isTextual() && !n.get("user").asText().isEmpty()) {
        a.put("user", n.get("user").asText());
      }
      a.put("symbol", n.get("symbol").asText());
      if (n.path("text").isTextual() && !n.get("text").asText().isEmpty()) {
        a.put("text", n.get("text").asText());
      }
      a.put("notification_ts_ms", nts);
      String result = "miss";
      if (tick != null) {
        int tb = tick.indexOf('|');
        JsonNode t = JSON.readTree(tick.substring(tb + 1));
        if (t != null && t.path("price").isNumber()) {
          double p = t.get("price").asDouble();
          // Go's encoding/json writes integral floats without ".0".
          if (p == Math.rint(p) && Math.abs(p) < 1e15) {
            a.put("price", (long) p);
          } else {
            a.put("price", p);
          }
          a.put("price_ts_ms", Long.parseLong(tick.substring(0, tb)));
          result = "local";
        }
      }
      a.put("result", result);
      a.put("worker", "kstreams");
      return JSON.writeValueAsString(a);
    } catch (Exception e) {
      return null;
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 5 && args.length != 6) {
      System.err.println(
          "usage: KStreamsPeer brokers application-id market notifications alerts"
              + " [at_least_once|exactly_once_v2]");
      System.exit(2);
    }
    String guarantee = args.length == 6 ? args[5] : StreamsConfig.AT_LEAST_ONCE;
    if (!guarantee.equals(StreamsConfig.AT_LEAST_ONCE)
        && !guarantee.equals(StreamsConfig.EXACTLY_ONCE_V2)) {
      System.err.println("processing guarantee " + guarantee + ": want at_least_once or exactly_once_v2");
      System.exit(2);
    }
    Properties p = new Properties();
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
    p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
    p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
    p.put(StreamsConfig.STATE_DIR_CONFIG, System.getProperty("java.io.tmpdir") + "/kstreams-peer-" + args[1]);
    p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");

    StreamsBuilder b = new StreamsBuilder();
    KTable<String, String> market =
        b.<String, String>stream(args[2]).processValues(WithTimestamp::new).toTable();
    KStream<String, String> notifications =
        b.<String, String>stream(args[3]).processValues(WithTimestamp::new);
    notifications
        .leftJoin(market, KStreamsPeer::alert)
        .filter((k, v) -> v != null)
        .to(args[4]);

    KafkaStreams streams = new KafkaStreams(b.build(), p);
    CountDownLatch done = new CountDownLatch(1);
    streams.setStateListener(
        (now, before) -> {
          if (now == KafkaStreams.State.RUNNING) {
            System.out.println("ready " + System.currentTimeMillis());
            System.out.flush();
          }
          if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
            done.countDown();
          }
        });
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  streams.close();
                  streams.cleanUp();
                  done.countDown();
                }));
    streams.start();
    done.await();
  }
}
