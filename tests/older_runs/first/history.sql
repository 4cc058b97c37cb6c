BEGIN TRANSACTION;
CREATE TABLE alerts (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    against TEXT NOT NULL,
    against_run TEXT NOT NULL,
    model TEXT NOT NULL,
    metric TEXT NOT NULL,
    before REAL,
    now REAL,
    allowed TEXT,
    PRIMARY KEY (run_id, against, model, metric)
);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO "meta" VALUES('schema_version','1');
INSERT INTO "meta" VALUES('watched','["best_val_loss", "val_iou"]');
CREATE TABLE metrics (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    model TEXT NOT NULL,
    metric TEXT NOT NULL,
    value REAL,
    PRIMARY KEY (run_id, model, metric)
);
INSERT INTO "metrics" VALUES('20261206-190206','fcn','params',881.0);
INSERT INTO "metrics" VALUES('20261206-190206','fcn','flops_per_example',1655808.0);
INSERT INTO "metrics" VALUES('20261206-190206','fcn','steps',16.0);
INSERT INTO "metrics" VALUES('20261206-190206','fcn','final_train_loss',1.4642838478088378018e+00);
INSERT INTO "metrics" VALUES('20261206-190206','fcn','best_val_loss',1.50592374801635742187e+00);
INSERT INTO "metrics" VALUES('20261206-190206','fcn','best_step',8.0);
INSERT INTO "metrics" VALUES('20261206-190206','fcn','ms_per_step',3.715);
INSERT INTO "metrics" VALUES('20261206-190206','fcn','images_per_s',2153.3);
INSERT INTO "metrics" VALUES('20261206-190206','fcn','val_f1',2.51307171555946951002e-01);
INSERT INTO "metrics" VALUES('20261206-190206','fcn','val_iou',1.43711444038776281484e-01);
INSERT INTO "metrics" VALUES('20261206-190206','fcn','val_loss',1.54025161266326904296e+00);
INSERT INTO "metrics" VALUES('20261206-190206','fcn','repeats',1.0);
INSERT INTO "metrics" VALUES('20261206-190206','fcn','val_iou_low',1.13082576355725425432e-01);
INSERT INTO "metrics" VALUES('20261206-190206','fcn','val_iou_high',1.8427672955974841451e-01);
INSERT INTO "metrics" VALUES('20261206-190206','fcn','val_f1_low',2.03223969899707868069e-01);
INSERT INTO "metrics" VALUES('20261206-190206','fcn','val_f1_high',3.11205523101433900734e-01);
INSERT INTO "metrics" VALUES('20261206-190206','fcn','val_loss_low',1.48812584512301260275e+00);
INSERT INTO "metrics" VALUES('20261206-190206','fcn','val_loss_high',1.58582425847930741369e+00);
INSERT INTO "metrics" VALUES('20261206-190206','fcn','learning_rate',0.003);
INSERT INTO "metrics" VALUES('20261206-190206','unet','params',15025.0);
INSERT INTO "metrics" VALUES('20261206-190206','unet','flops_per_example',8756228.0);
INSERT INTO "metrics" VALUES('20261206-190206','unet','steps',16.0);
INSERT INTO "metrics" VALUES('20261206-190206','unet','final_train_loss',1.2842532515525817427e+00);
INSERT INTO "metrics" VALUES('20261206-190206','unet','best_val_loss',1.75428152084350585937e+00);
INSERT INTO "metrics" VALUES('20261206-190206','unet','best_step',8.0);
INSERT INTO "metrics" VALUES('20261206-190206','unet','ms_per_step',10.631);
INSERT INTO "metrics" VALUES('20261206-190206','unet','images_per_s',752.5);
INSERT INTO "metrics" VALUES('20261206-190206','unet','val_f1',2.49715370018975341137e-01);
INSERT INTO "metrics" VALUES('20261206-190206','unet','val_iou',1.42671292281006084623e-01);
INSERT INTO "metrics" VALUES('20261206-190206','unet','val_loss',2.2185611724853515625e+00);
INSERT INTO "metrics" VALUES('20261206-190206','unet','repeats',1.0);
INSERT INTO "metrics" VALUES('20261206-190206','unet','val_iou_low',1.12180097548275597985e-01);
INSERT INTO "metrics" VALUES('20261206-190206','unet','val_iou_high',1.82249697897254037126e-01);
INSERT INTO "metrics" VALUES('20261206-190206','unet','val_f1_low',2.01799848245846152883e-01);
INSERT INTO "metrics" VALUES('20261206-190206','unet','val_f1_high',3.08398205128056546175e-01);
INSERT INTO "metrics" VALUES('20261206-190206','unet','val_loss_low',2.10972217324956634598e+00);
INSERT INTO "metrics" VALUES('20261206-190206','unet','val_loss_high',2.32163975044843828854e+00);
INSERT INTO "metrics" VALUES('20261206-190206','unet','learning_rate',0.003);
INSERT INTO "metrics" VALUES('20261206-190206','deconv','params',3241.0);
INSERT INTO "metrics" VALUES('20261206-190206','deconv','flops_per_example',731136.0);
INSERT INTO "metrics" VALUES('20261206-190206','deconv','steps',16.0);
INSERT INTO "metrics" VALUES('20261206-190206','deconv','final_train_loss',1.32406919002532963425e+00);
INSERT INTO "metrics" VALUES('20261206-190206','deconv','best_val_loss',1.38861560821533203125e+00);
INSERT INTO "metrics" VALUES('20261206-190206','deconv','best_step',16.0);
INSERT INTO "metrics" VALUES('20261206-190206','deconv','ms_per_step',5.035);
INSERT INTO "metrics" VALUES('20261206-190206','deconv','images_per_s',1588.7);
INSERT INTO "metrics" VALUES('20261206-190206','deconv','val_f1',0.0);
INSERT INTO "metrics" VALUES('20261206-190206','deconv','val_iou',0.0);
INSERT INTO "metrics" VALUES('20261206-190206','deconv','val_loss',1.38861560821533203125e+00);
INSERT INTO "metrics" VALUES('20261206-190206','deconv','repeats',1.0);
INSERT INTO "metrics" VALUES('20261206-190206','deconv','val_iou_low',0.0);
INSERT INTO "metrics" VALUES('20261206-190206','deconv','val_iou_high',0.0);
INSERT INTO "metrics" VALUES('20261206-190206','deconv','val_f1_low',0.0);
INSERT INTO "metrics" VALUES('20261206-190206','deconv','val_f1_high',0.0);
INSERT INTO "metrics" VALUES('20261206-190206','deconv','val_loss_low',1.36189708945635423731e+00);
INSERT INTO "metrics" VALUES('20261206-190206','deconv','val_loss_high',1.41428732863486);
INSERT INTO "metrics" VALUES('20261206-190206','deconv','learning_rate',0.003);
CREATE TABLE models (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    model TEXT NOT NULL,
    status TEXT NOT NULL,
    PRIMARY KEY (run_id, model)
);
INSERT INTO "models" VALUES('20261206-190206','fcn','ok');
INSERT INTO "models" VALUES('20261206-190206','unet','ok');
INSERT INTO "models" VALUES('20261206-190206','deconv','ok');
CREATE TABLE nights (night TEXT PRIMARY KEY, run_id TEXT NOT NULL, registered TEXT NOT NULL);
INSERT INTO "nights" VALUES('2026-12-06','20261206-190206','2026-12-06T19:02:06+00:00');
CREATE TABLE pins (slot TEXT PRIMARY KEY, run_id TEXT NOT NULL, pinned TEXT NOT NULL);
CREATE TABLE race_rungs (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    rung INTEGER NOT NULL,
    epoch INTEGER,
    models_finished INTEGER,
    spearman REAL,
    PRIMARY KEY (run_id, rung)
);
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    night TEXT,
    status TEXT NOT NULL,
    started TEXT,
    ended TEXT,
    recorded TEXT NOT NULL,
    fingerprint TEXT,
    git_commit TEXT,
    versions TEXT,
    devices TEXT,
    placement TEXT,
    run_dir TEXT,
    regressions INTEGER
);
INSERT INTO "runs" VALUES('20261206-190206','2026-12-06','completed','2026-12-06T19:02:06+00:00','2026-12-06T19:02:18+00:00','2026-12-06T19:02:18+00:00','9f6f611672bd1e25',NULL,'{"python": "3.11.7", "tensorflow": "2.21.0", "tf_keras": "2.21.0", "segmentation_models": "1.0.1", "harness": "0.1.0"}','["/device:CPU:0"]','{"strategy": "one_device", "devices": ["/cpu:0"], "replicas": 1, "global_batch": 8, "per_replica_batch": 8, "precision": "float32", "models": {"fcn": ["/cpu:0"], "unet": ["/cpu:0"], "deconv": ["/cpu:0"]}}','{EXPERIMENT}/20261206-190206',0);
COMMIT;
