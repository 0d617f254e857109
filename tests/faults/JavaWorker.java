import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONObject;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * RocketMQ 4.9.8's Java client as a chaos worker (issue #31), writing the lines of tests/faults/pyworker.py
 * so one checker reads every client's history: "send" per attempt (id, t0, t, ok, status, queue, the
 * broker's offset message id "omid", the client's "msgid", or "error"), "recv" per delivery (id, queue,
 * offset, reconsume, t). Runs until a line arrives on stdin.
 *
 * Usage: JavaWorker '{"mode": "produce"|"push", "namesrv", "topic", "group", "first", "interval_ms",
 * "kind": "ordered"|"normal", "send_timeout" (s), "retry_times", "orderly"}'
 */
public final class JavaWorker {
    private static volatile boolean stopping;
    private static final CountDownLatch STOP = new CountDownLatch(1);

    private JavaWorker() {
    }

    public static void main(String[] args) throws Exception {
        // a rebalance every 2 s (4.9.8: 20 s), read once when the rebalance service loads
        System.setProperty("rocketmq.client.rebalance.waitInterval", "2000");
        JSONObject cfg = JSON.parseObject(args[0]);
        Thread watch = new Thread(() -> {
            try {
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
            } catch (Exception e) {
                // stdin closed: stop as well
            }
            stopping = true;
            STOP.countDown();
        });
        watch.setDaemon(true);
        watch.start();
        if ("produce".equals(cfg.getString("mode"))) {
            produce(cfg);
        } else {
            push(cfg);
        }
        emit(line("ev", "done"));
        System.exit(0);
    }

    static Map<String, Object> line(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i + 1 < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        return m;
    }

    static synchronized void emit(Map<String, Object> m) {
        m.putIfAbsent("t", System.currentTimeMillis() / 1000.0);
        System.out.println(JSON.toJSONString(m));
        System.out.flush();
    }

    /** Route and heartbeat every 2 s (4.9.8: 30 s), as the other workers do, and a name of its own. */
    static void fast(ClientConfig c, JSONObject cfg) {
        c.setNamesrvAddr(cfg.getString("namesrv"));
        c.setPollNameServerInterval(2000);
        c.setHeartbeatBrokerInterval(2000);
        c.setInstanceName(cfg.getString("group") + "-" + ProcessHandle.current().pid());
    }

    static void produce(JSONObject cfg) throws Exception {
        String topic = cfg.getString("topic");
        boolean ordered = "ordered".equals(cfg.getString("kind"));
        DefaultMQProducer p = new DefaultMQProducer(cfg.getString("group"));
        fast(p, cfg);
        if (cfg.containsKey("send_timeout")) {
            p.setSendMsgTimeout((int) (cfg.getDoubleValue("send_timeout") * 1000));
        }
        if (cfg.containsKey("retry_times")) {
            p.setRetryTimesWhenSendFailed(cfg.getIntValue("retry_times"));
        }
        p.start();
        long interval = cfg.getLongValue("interval_ms");
        for (long i = cfg.getLongValue("first"); !stopping; i++) {
            String body = topic + "-" + i;
            Message msg = new Message(topic, body.getBytes(StandardCharsets.UTF_8));
            Map<String, Object> rec = line("ev", "send", "id", body, "i", i, "t0", System.currentTimeMillis() / 1000.0);
            try {
                SendResult r;
                if (ordered) {  // sharding key k(i mod 8), one queue per key, as pyworker's ordered kind
                    String key = "k" + (i % 8);
                    rec.put("key", key);
                    r = p.send(msg, (List<MessageQueue> mqs, Message m, Object k) ->
                            mqs.get(Math.floorMod(k.hashCode(), mqs.size())), key);
                } else {
                    r = p.send(msg);
                }
                rec.put("ok", r.getSendStatus() == SendStatus.SEND_OK);
                rec.put("status", r.getSendStatus().name());
                rec.put("queue", r.getMessageQueue().getQueueId());
                rec.put("omid", r.getOffsetMsgId());
                rec.put("msgid", r.getMsgId());
            } catch (Exception e) {
                rec.put("ok", false);
                String code = e instanceof MQBrokerException ? " code " + ((MQBrokerException) e).getResponseCode() : "";
                String text = e.getClass().getSimpleName() + code + ": " + e.getMessage();
                rec.put("error", text.substring(0, Math.min(200, text.length())));
            }
            rec.put("t", System.currentTimeMillis() / 1000.0);
            emit(rec);
            if (interval > 0) {
                STOP.await(interval, java.util.concurrent.TimeUnit.MILLISECONDS);
            }
        }
        p.shutdown();
    }

    static Map<String, Object> delivery(MessageExt m) {
        return line("ev", "recv", "id", new String(m.getBody(), StandardCharsets.UTF_8), "topic", m.getTopic(),
                "queue", m.getQueueId(), "offset", m.getQueueOffset(), "reconsume", m.getReconsumeTimes(),
                "result", "ok");
    }

    static void push(JSONObject cfg) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(cfg.getString("group"));
        fast(c, cfg);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPersistConsumerOffsetInterval(1000);
        c.subscribe(cfg.getString("topic"), "*");
        if (cfg.getBooleanValue("orderly")) {
            c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    emit(delivery(m));
                }
                return ConsumeOrderlyStatus.SUCCESS;
            });
        } else {
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    emit(delivery(m));
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        }
        c.start();
        emit(line("ev", "started"));
        STOP.await();
        c.shutdown();
    }
}
